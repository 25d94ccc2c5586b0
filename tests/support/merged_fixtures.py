"""Real trace sets merged (all ranks in one file) and loaded once per test session, for the
stall-analysis SQL tests (registered once in conftest)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from support.paths import DATA, SHARED_TRACES
from tokentrace.catalog import open_trace
from tokentrace.errors import TokentraceWarning

#: name -> folder. The samples are committed; the large sets exist where ../shared does (CI).
TRACE_SETS = {
    "sample_t39_tp2": DATA / "sample_t39_tp2",
    "sample_t36_tp2": DATA / "sample_t36_tp2",
    "t39_tp2": SHARED_TRACES / "t39_tp2",
    "t36_tp2": SHARED_TRACES / "t36_tp2",
}
#: Serving-engine sets (CUDA-graph decode, linked scopes, threads; transformers' generate()):
#: their truth names each stall's kind, frame and thread.
SERVING_SETS = {
    "engine_graph": SHARED_TRACES / "engine_graph",
    "engine_mixed": SHARED_TRACES / "engine_mixed",
    "hf_generate": SHARED_TRACES / "hf_generate",
    # the torch profiler as the GPU side: beside VizTracer, and alone with its Python stacks
    "engine_kineto": SHARED_TRACES / "engine_kineto",
    "engine_mixed_kineto": SHARED_TRACES / "engine_mixed_kineto",
    "engine_kineto_stack": SHARED_TRACES / "engine_kineto_stack",
}
#: Third-party engines (transformers' continuous batching: a worker thread launches, a client
#: thread streams; torch.compile CUDA-graph decode): truth as the serving sets'.
THIRD_PARTY_SETS = {
    "engine_cb_viz": SHARED_TRACES / "engine_cb_viz",
    "engine_cb_stack": SHARED_TRACES / "engine_cb_stack",
    "compile_kineto": SHARED_TRACES / "compile_kineto",
}
#: A decode loop that calls `.cpu()` every step, then, every 4th step, runs 5 ms of busy Python
#: (`detokenize_responses`) before it launches again (tests/data/README.md).
BUSY_AFTER_SYNC = {"sim_busy_t36": DATA / "sim_busy_t36"}
#: The serving sets whose GPU side is Proton with tokenspeed's linked kernel scopes.
PROTON_ENGINE_SETS = ("engine_graph", "engine_mixed")


def available_sets() -> list[str]:
    """Names of the decode-loop trace sets present on this machine (samples always)."""
    return [name for name, folder in TRACE_SETS.items() if folder.is_dir()]


def serving_sets() -> list[str]:
    """Names of the serving-engine sets present on this machine (none without ../shared)."""
    return [name for name, folder in SERVING_SETS.items() if folder.is_dir()]


@pytest.fixture(scope="session")
def analyze_root(tmp_path_factory) -> Path:
    """The session's `tokentrace analyze` outputs: ``<root>/<set>/`` (its merge in ``merged/``)."""
    return tmp_path_factory.mktemp("analyze")


@pytest.fixture(scope="session")
def merged_sets(analyze_root):
    """get(name) -> (folder, combined merged path, open Engine); merged and loaded on first use.

    The merge goes to ``<analyze_root>/<name>/merged``, the cache `tokentrace analyze -o
    <analyze_root>/<name>` reads: each set is merged once per session, whichever asks first.
    The triton 3.6 sets have no Proton anchor: the merge estimates the offset (its default).
    """
    from tokentrace.merge import merged_folder

    cache = {}

    def get(name: str):
        if name not in cache:
            folder = {**TRACE_SETS, **SERVING_SETS, **THIRD_PARTY_SETS, **BUSY_AFTER_SYNC}[name]
            if not folder.is_dir():
                pytest.skip(f"trace set {name} not present at {folder}")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", TokentraceWarning)
                merged = merged_folder(folder, analyze_root / name / "merged")
                cache[name] = (folder, merged.path, open_trace(merged.path, warn=False))
        return cache[name]

    yield get
    for _, _, engine in cache.values():
        engine.close()
