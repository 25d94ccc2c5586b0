"""The one user cache folder of tokentrace: compiled WebAssembly modules (``wasm/``) and merged
profile folders whose own folder is read-only (``merged/``).

``$TOKENTRACE_CACHE_DIR`` when set, else the platform's user cache (``$XDG_CACHE_HOME``,
default ``~/.cache``) ``/tokentrace``.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "TOKENTRACE_CACHE_DIR"


def cache_root() -> Path:
    """The user cache folder (not created here)."""
    named = os.environ.get(CACHE_ENV)
    if named:
        return Path(named).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tokentrace"
