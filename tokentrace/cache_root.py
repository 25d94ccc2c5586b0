"""The one user cache folder of tokentrace: compiled WebAssembly modules (``wasm/``), merged
profile folders whose own folder is read-only (``merged/``) and annotated copies of merged traces
(``annotated/``).

``$TOKENTRACE_CACHE_DIR`` when set, else the platform's user cache (``$XDG_CACHE_HOME``,
default ``~/.cache``) ``/tokentrace``. Created 0700 when missing (its missing parents too): it
holds copies of traces, which hold source paths and arguments, and on a shared machine only
their owner may read those. A folder that exists is left as it is (the user's choice); what is
written inside it is no more readable than its inputs (:func:`tokentrace.journal.write_mask`).
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "TOKENTRACE_CACHE_DIR"


def cache_root() -> Path:
    """The user cache folder, created (0700) when missing and possible."""
    named = os.environ.get(CACHE_ENV)
    if named:
        root = Path(named).expanduser()
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tokentrace"
    _make_private(root)
    return root


def _make_private(root: Path) -> None:
    """Creates ``root`` and its missing parents 0700 (makedirs gives parents 0777 - umask).
    Failing is not an error here: the write that needs the folder says why, naming it."""
    missing = []
    probe = root
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            continue
        except OSError:
            return
