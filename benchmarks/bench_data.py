"""Where the benchmarks find their data: what the repository holds, unless told otherwise.

* The committed samples (``tests/data/``) are every benchmark's default.
* The larger recorded sets (``t39_tp2``, ``t36_tp2``, ``engine_*``, ``hf_generate``, ``compile_*``) are
  recorded by the workloads in ``examples/`` (the exact commands: examples/README.md); pass a set's
  folder as a benchmark's argument, or the folder holding them as ``$TOKENTRACE_BENCH_SETS``.
* The reference merger is tokenspeed's ``tokenspeed_trace_merge.py`` (the tokenspeed repository's
  ``merge-traces``): pass its path with ``--reference`` or ``$TOKENTRACE_BENCH_REFERENCE``; without
  it the reference's figures are skipped.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
SETS_ENV = "TOKENTRACE_BENCH_SETS"
REFERENCE_ENV = "TOKENTRACE_BENCH_REFERENCE"
#: The committed sample standing in for each recorded set (same workload, fewer steps).
SAMPLE_FOR = {"t39_tp2": "sample_t39_tp2", "t36_tp2": "sample_t36_tp2"}


def sets_folder() -> Path | None:
    """The folder of recorded sets ($TOKENTRACE_BENCH_SETS), None when unset or missing."""
    named = os.environ.get(SETS_ENV)
    return Path(named).expanduser() if named and Path(named).expanduser().is_dir() else None


def find_set(name: str) -> Path | None:
    """The recorded set ``name`` from $TOKENTRACE_BENCH_SETS, else the committed sample of that
    name (or standing in for it: :data:`SAMPLE_FOR`), else None."""
    sets = sets_folder()
    if sets is not None and (sets / name).is_dir():
        return sets / name
    for candidate in (DATA / name, DATA / SAMPLE_FOR.get(name, name)):
        if candidate.is_dir():
            return candidate
    return None


def default_sets(*names: str) -> list[Path]:
    """:func:`find_set` of each name, those found, without repeats."""
    found = [find_set(name) for name in names]
    return list(dict.fromkeys(p for p in found if p is not None))


def reference_script(given: Path | None = None) -> Path | None:
    """The reference merger: ``given``, else $TOKENTRACE_BENCH_REFERENCE; None when neither
    names an existing file."""
    path = given or (Path(os.environ[REFERENCE_ENV]) if os.environ.get(REFERENCE_ENV) else None)
    return path if path is not None and path.is_file() else None


def fresh_cache(folder: Path) -> dict[str, str]:
    """An environment whose tokentrace user cache is ``folder``: empty but for a copy of the
    compiled engine, so that a command measured there merges afresh without compiling."""
    from tokentrace.runtime.files import cache_root

    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    compiled = cache_root() / "wasm"
    if compiled.is_dir() and not (folder / "wasm").exists():
        shutil.copytree(compiled, folder / "wasm")
        os.chmod(folder / "wasm", 0o700)
    return {**os.environ, "TOKENTRACE_CACHE_DIR": str(folder)}
