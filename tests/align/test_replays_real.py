"""Anchorless alignment through CUDA-graph replays, on real traces.

* ``tests/data/compile_proton_cut`` (committed): the first 160 ms of ``compile_proton``'s Proton
  file and the report's replay, wait and launch calls of that time (see tests/data/README.md).
* ``../shared/traces`` where present: the whole ``compile_proton`` (interval and truth stalls) and
  the anchored graph sets, whose anchors must lie in the interval the replays give.
"""

from __future__ import annotations

import gzip
import warnings
from pathlib import Path

import orjson
import pytest

from tokentrace.align.estimate import check_anchor, estimate_offset, prepare_kernels
from tokentrace.align.policy import AlignRequest, RankEvidence, align
from tokentrace.align.replays import read_replay_calls
from tokentrace.errors import TokentraceWarning
from tokentrace.sources.proton import estimator_kernels, read_proton

REPO = Path(__file__).resolve().parents[2]
CUT = REPO / "tests" / "data" / "compile_proton_cut"
SHARED = REPO.parent / "shared" / "traces"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} absent (CI has it)")
GRAPH_KERNELS = 151  # kernels of compile_proton's decode graph, one run per replay
# Every test reads compile_proton_cut or the shared traces: out of the quick run (tests/conftest.py).
pytestmark = pytest.mark.slow


def viz_base_ns(viz: Path) -> int:
    """The report's anchor, read with the standard parser (test side)."""
    return orjson.loads(gzip.decompress(viz.read_bytes()))["viztracer_metadata"]["baseTimeNanoseconds"]


def prepared(proton: Path):
    return prepare_kernels(estimator_kernels(read_proton([proton])))


@pytest.fixture(scope="module")
def cut():
    return prepared(CUT / "cgp-TP0.proton.chrome_trace.gz")


def test_replays_are_runs_of_graph_kernels(cut) -> None:
    runs = cut.runs.by_stream
    assert list(runs) == [7] and len(runs[7]) == 14
    assert all(cut.index.rank_in_stream[last] - cut.index.rank_in_stream[first] + 1 == GRAPH_KERNELS
               for first, last in runs[7])
    # graph kernels had no launch call: none is offered to the Triton launches
    assert not any(cut.index.in_graph[k] for k in cut.triton)


def test_replay_calls_are_the_innermost(cut) -> None:
    calls = read_replay_calls(CUT / "cgp-TP0.viztracer.json.gz")
    assert len(calls) == 14 and {c.name for c in calls} == {"torch._C.replay"}


def test_the_cut_is_aligned_by_its_replays(cut) -> None:
    est = estimate_offset(CUT / "cgp-TP0.viztracer.json.gz", cut)
    assert est.method == "graph-replay+sync" and est.n_replays == 14
    assert est.hi_ns - est.lo_ns <= 100_000
    assert est.lo_ns <= est.offset_ns <= est.hi_ns
    assert est.lo_by.startswith("graph replay end") and est.hi_by.startswith("device sync")


def test_without_graph_evidence_the_cut_is_refused() -> None:
    plain = prepare_kernels(read_proton([CUT / "cgp-TP0.proton.chrome_trace.gz"]).kernels())
    assert estimate_offset(CUT / "cgp-TP0.viztracer.json.gz", plain).refused


def truth_stalls(folder: str, rank: str) -> list[tuple[int, int]]:
    truth = orjson.loads(gzip.decompress(next((SHARED / folder).glob(f"*-{rank}.truth.json.gz")).read_bytes()))
    return [(s["start_ns"], s["end_ns"]) for s in truth["stalls"]]


@needs_shared
def test_compile_proton_interval_and_truth_stalls() -> None:
    folder = SHARED / "compile_proton"
    viz = folder / "cgp-TP0.viztracer.json.gz"
    trace = read_proton([folder / "cgp-TP0.proton.chrome_trace.gz"])
    est = estimate_offset(viz, prepare_kernels(estimator_kernels(trace)))
    assert not est.refused and est.hi_ns - est.lo_ns <= 100_000, est.reason
    base = viz_base_ns(viz)
    kernels = sorted((start + est.offset_ns, end + est.offset_ns) for _, start, end, _ in trace.kernels())
    busy_until, gaps = kernels[0][1], []
    for start, end in kernels[1:]:
        if start - busy_until >= 1_000_000:
            gaps.append((busy_until, start))
        busy_until = max(busy_until, end)
    for start_ns, end_ns in truth_stalls("compile_proton", "TP0"):
        stall = (start_ns - base, end_ns - base)  # VizTracer axis
        assert any(a <= stall[0] + 200_000 and stall[1] <= b for a, b in gaps), stall


@needs_shared
@pytest.mark.parametrize("folder", ["engine_graph", "engine_mixed"])
def test_anchors_lie_in_the_replay_interval(folder: str) -> None:
    """Ground truth for the replay rules: anchored sets whose decode replays back to back (one run
    of graph kernels holds many replays) under overlap scheduling."""
    for viz in sorted((SHARED / folder).glob("*.viztracer.json.gz")):
        proton = viz.with_name(viz.name.replace(".viztracer.json.gz", ".proton.chrome_trace.gz"))
        trace = read_proton([proton])
        est = estimate_offset(viz, prepare_kernels(estimator_kernels(trace)))
        anchored = trace.base_ns - viz_base_ns(viz)
        assert est.n_replays > 0 and check_anchor(est, anchored, tolerance_ns=0), (viz, est)
        assert est.hi_ns - est.lo_ns <= 100_000, est.reason


def test_merge_metadata_names_the_evidence(cut) -> None:
    evidence = RankEvidence("TP0", CUT / "cgp-TP0.viztracer.json.gz", None,
                            CUT / "cgp-TP0.proton.chrome_trace.gz", None, cut)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TokentraceWarning)
        alignment = align(AlignRequest(), evidence)
    assert alignment.method == "estimated" and alignment.width_ns <= 100_000
    assert alignment.evidence.startswith("lower: graph replay end") and "upper: device sync" in alignment.evidence
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "µs wide" in messages[0] and "lower: graph replay end" in messages[0]
