"""Shared fixtures: the committed sample traces and, when present, the large shared traces.

The quick run, ``python -m pytest -m "not slow"``, leaves out every test marked ``slow``; CI runs
the whole suite. The rule: a test is ``slow`` when it reads a real trace -- a shared set beside the
clone (../shared/traces) or a real sample committed under tests/data/ (sample_t39_tp2,
sample_t36_tp2, sim_busy_t36, compile_proton_cut, diff_serve_engine) -- or runs a whole command or
process on one, or drives a browser, or compiles the engine's WebAssembly module from scratch.
Quick: unit tests, tiny hand-written traces, SQL on tiny inline traces. One exception, so that the
quick run keeps hostile inputs: tests/robustness/ tests that edit a copy of one sample rank
(support/hostile.py) and refuse or merge it in about a second stay quick.

Most marks are set here, at collection: by the fixtures a test uses (``REAL_TRACE_FIXTURES``), by a
real set's name or a path into one among its parameters, and, for tests/view/ (whose files this
rule leaves alone), by module (``SLOW_VIEW_MODULES``). A module that reads real traces through its
own constants or fixtures marks itself (``pytestmark = pytest.mark.slow`` or ``@pytest.mark.slow``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from support.paths import DATA, SHARED_TRACES

#: The user cache's variable (tokentrace.runtime.files.CACHE_ENV), and the one that says this
#: session (or the pytest that started this worker) made the folder it names.
CACHE_ENV = "TOKENTRACE_CACHE_DIR"
SESSION_CACHE_ENV = "TOKENTRACE_TEST_SESSION_CACHE"


def _user_cache() -> Path:
    """Where tokentrace's user cache is for the one running the tests (cache_root's rule, the
    folder not created)."""
    named = os.environ.get(CACHE_ENV)
    if named:
        return Path(named).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tokentrace"


def _session_cache() -> None:
    """Points ``$TOKENTRACE_CACHE_DIR`` at a temporary folder for the whole test session, here at
    import, before any test or subprocess (they inherit it): the merges the tests make never fill
    the user's cache, and none of theirs is reused. The compiled engine (``wasm/``) is copied in
    from the user's cache when there (copied, not linked: tests corrupt and remove modules), so
    the session does not compile it again. Removed at exit; a worker pytest started (xdist)
    shares its parent's. Tests that set the variable themselves (monkeypatch) still win."""
    if os.environ.get(SESSION_CACHE_ENV) and os.environ.get(SESSION_CACHE_ENV) == os.environ.get(CACHE_ENV):
        return
    compiled = _user_cache() / "wasm"
    root = Path(tempfile.mkdtemp(prefix="tokentrace-test-cache-"))  # 0700, as cache_root makes it
    if compiled.is_dir():
        shutil.copytree(compiled, root / "wasm", symlinks=True)
        os.chmod(root / "wasm", 0o700)
    os.environ[CACHE_ENV] = os.environ[SESSION_CACHE_ENV] = str(root)
    atexit.register(_remove, root, os.getpid())


def _remove(root: Path, owner: int) -> None:
    """Removes the session's cache folder, also where a test left a folder in it read-only; in
    this session's process only (a child forked from it may run the exit handlers too)."""
    if os.getpid() != owner:
        return

    def writable_then_retry(function, path, _error) -> None:
        try:
            for folder in (Path(path).parent, Path(path)):
                if folder.is_dir() and not folder.is_symlink():
                    folder.chmod(0o700)
            function(path)
        except OSError:
            pass  # left in the temporary folder: nothing else to do at exit

    shutil.rmtree(root, onerror=writable_then_retry)


_session_cache()

#: The real traces committed under tests/data/ (tests/data/README.md says what each records).
REAL_SAMPLES = ("sample_t39_tp2", "sample_t36_tp2", "sim_busy_t36", "compile_proton_cut", "diff_serve_engine",
                "autogc_kineto")

# Session fixtures shared by several test modules, registered once (an import per module would
# register, and run, a session fixture once per importing module).
pytest_plugins = ["support.analysis_fixtures", "support.merged_fixtures", "support.engine_fixtures",
                  "support.sql_fixtures"]


@pytest.fixture(scope="session")
def sample_t39() -> Path:
    """Two ranks, triton 3.9 Proton (anchors, scopes, flows), 40 steps."""
    return DATA / "sample_t39_tp2"


@pytest.fixture(scope="session")
def sample_t36() -> Path:
    """Two ranks, triton 3.6 Proton (kernels only, no anchor), 40 steps."""
    return DATA / "sample_t36_tp2"


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    """The large real traces next to the clone (CI has them); skips when absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"large real traces not present at {SHARED_TRACES} (CI has ../shared)")
    return SHARED_TRACES


#: Fixtures that load, merge, analyze, annotate or diff a real trace, or drive a browser.
REAL_TRACE_FIXTURES = frozenset({
    "shared_traces", "sample_t39", "sample_t36",  # here
    "merged_sets",  # support/merged_fixtures.py
    "analyzed_t39", "analyzed_t36", "analysis_t39",  # support/analysis_fixtures.py
    "loaded_traces",  # support/engine_fixtures.py
    "merged_t39", "raw_proton_t39",  # support/sql_fixtures.py
    "annotated_t39",  # annotate/conftest.py
    "serve_pair", "serve_diffs",  # diff/conftest.py
    "annotated_sample", "view_process", "chromium",  # view/conftest.py
})
#: tests/view/ modules marked ``slow`` whole, from here: each test starts `tokentrace view` (and
#: signals it) or a browser on the merged sample. Their files are not edited for the mark.
SLOW_VIEW_MODULES = frozenset({"tests/view/test_view_signals.py", "tests/view/test_view_browser.py"})
#: Modules that start a dask client in the test process: it leaves a thread (dask's offload
#: pool) alive to the end, and with a thread alive tokentrace forks nothing (``can_fork``). They
#: run last, so that every other test takes the forked paths it tests.
LAST_MODULES = ("tests/fleet/test_rank_set.py", "tests/fleet/test_dask_errors.py")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "slow: reads a real trace (../shared/traces or a real sample "
                            "under tests/data/), or runs a command, process or browser on one; "
                            "`pytest -m 'not slow'` is the quick run (tests/conftest.py)")


def _real_trace_parameter(value, names: set[str], folders: tuple[Path, ...]) -> bool:
    """A real set's name, a fixture of REAL_TRACE_FIXTURES by name (``request.getfixturevalue``),
    or a path into a real set."""
    if isinstance(value, str):
        return value in names or value in REAL_TRACE_FIXTURES
    if isinstance(value, Path):
        return any(folder == value or folder in value.parents for folder in folders)
    return False


def pytest_collection_modifyitems(config, items) -> None:
    """Marks ``slow`` by the rule of this module's docstring; orders the modules by their number
    of tests, most first, and ``LAST_MODULES`` last."""
    from support.merged_fixtures import BUSY_AFTER_SYNC, SERVING_SETS, THIRD_PARTY_SETS, TRACE_SETS

    real_sets = set({**TRACE_SETS, **SERVING_SETS, **THIRD_PARTY_SETS, **BUSY_AFTER_SYNC})
    folders = (SHARED_TRACES, *(DATA / name for name in REAL_SAMPLES))
    slow_view = {config.rootpath / module for module in SLOW_VIEW_MODULES}
    for item in items:
        callspec = getattr(item, "callspec", None)
        values = callspec.params.values() if callspec is not None else ()
        if (REAL_TRACE_FIXTURES.intersection(item.fixturenames) or item.path in slow_view
                or any(_real_trace_parameter(value, real_sets, folders) for value in values)):
            item.add_marker(pytest.mark.slow)
    last = {config.rootpath / module for module in LAST_MODULES}
    # Modules of many tests first, so that the two test processes (pyproject.toml) end together;
    # stable: a module's tests stay together and in order.
    tests_in = Counter(item.path for item in items)
    items.sort(key=lambda item: (item.path in last, -tests_in[item.path]))
