"""Real trace sets merged (all ranks in one file) and loaded once per test session, for the
stall-analysis SQL tests. Import the fixtures where they are used:
``from stall_fixtures import merged_sets  # noqa: F401``."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tokentrace.engine import open_trace
from tokentrace.errors import TokentraceWarning

DATA = Path(__file__).parent / "data"
SHARED_TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"

#: name -> folder. The samples are committed; the large sets exist where ../shared does (CI).
TRACE_SETS = {
    "sample_t39_tp2": DATA / "sample_t39_tp2",
    "sample_t36_tp2": DATA / "sample_t36_tp2",
    "t39_tp2": SHARED_TRACES / "t39_tp2",
    "t36_tp2": SHARED_TRACES / "t36_tp2",
}


def available_sets() -> list[str]:
    """Names of the trace sets present on this machine (samples always)."""
    return [name for name, folder in TRACE_SETS.items() if folder.is_dir()]


@pytest.fixture(scope="session")
def merged_sets(tmp_path_factory):
    """get(name) -> (folder, combined merged path, open Engine); merged and loaded on first use.

    The triton 3.6 sets have no Proton anchor: the merge estimates the offset (its default).
    """
    from tokentrace.merge import merge

    cache = {}

    def get(name: str):
        if name not in cache:
            folder = TRACE_SETS[name]
            if not folder.is_dir():
                pytest.skip(f"trace set {name} not present at {folder}")
            out = tmp_path_factory.mktemp(f"merged_{name}")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", TokentraceWarning)
                result = merge([folder], out, combine=True)
                cache[name] = (folder, result.combined, open_trace(result.combined, warn=False))
        return cache[name]

    yield get
    for _, _, engine in cache.values():
        engine.close()
