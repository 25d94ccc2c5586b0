"""The graph-replay bound rules on tiny hand-written traces (edge cases the real ones lack)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from tokentrace.align.estimate import estimate_from_events, prepare_kernels
from tokentrace.align.policy import AlignRequest, RankEvidence, align
from tokentrace.align.replays import GRAPH_SUBMIT_SLACK_NS, innermost, read_replay_calls
from tokentrace.errors import TokentraceWarning
from tokentrace.sources.host_calls import HostCall, HostEvents

US = 1000
GRAPH = ("g1", "g2", "g3")


def replay_trace(first_after_begin_us: int, replays: int = 8, side_stream: bool = False):
    """``replays`` graph replays (calls of 400 µs every 1000 µs, offset 0), each ``GRAPH`` on
    stream 7 from ``first_after_begin_us`` after its call began, an eager kernel between two;
    a device sync after the last, returning 2 µs after the GPU drained."""
    calls, rows = [], []
    for k in range(replays):
        begin = 1000 * k * US
        calls.append(HostCall("torch._C.replay", begin, begin + 400 * US))
        start = begin + first_after_begin_us * US
        for name in GRAPH:
            rows.append((name, start, start + 5 * US, 7, True))
            start += 5 * US
        if k < replays - 1:
            rows.append(("eager", start + 50 * US, start + 55 * US, 7, False))
    if side_stream:  # a graph forking onto a side stream in one replay only
        rows.append(("side", first_after_begin_us * US, first_after_begin_us * US + 1 * US, 9, True))
    last_end = max(row[2] for row in rows)
    sync = HostCall("torch._C._cuda_synchronize", calls[-1].end_ns + 10 * US, last_end + 2 * US)
    return HostEvents((), (sync,)), tuple(calls), rows


def test_a_replay_starting_before_its_call_returns_bounds_from_the_end() -> None:
    host, calls, rows = replay_trace(first_after_begin_us=390)
    est = estimate_from_events(host, rows, replays=calls)
    assert est.method == "graph-replay+sync" and est.n_replays == 8
    assert est.lo_ns == 400 * US - GRAPH_SUBMIT_SLACK_NS - 390 * US  # end - slack - first start
    assert est.hi_ns == 2 * US and est.lo_by.startswith("graph replay end")


def test_the_submission_rule_yields_to_the_waits() -> None:
    # first kernels 100 µs before their call returns: the submission bound (50 µs) would pass the
    # device sync's upper bound (2 µs); only the causal bound (call begin) is kept
    host, calls, rows = replay_trace(first_after_begin_us=300)
    est = estimate_from_events(host, rows, replays=calls)
    assert (est.lo_ns, est.hi_ns) == (-300 * US, 2 * US)
    assert est.lo_by == "graph replay (torch._C.replay)"


def test_without_a_wait_replays_alone_give_no_interval() -> None:
    _, calls, rows = replay_trace(first_after_begin_us=390)
    est = estimate_from_events(HostEvents((), ()), rows, replays=calls)
    assert est.refused and "no GPU wait" in est.reason


def test_back_to_back_replays_are_split_by_the_graph_period() -> None:
    _, calls, rows = replay_trace(first_after_begin_us=390)
    merged = [row for row in rows if row[0] != "eager"]  # no kernel between replays
    runs = prepare_kernels(merged).runs.by_stream[7]
    assert len(runs) == 8
    cut = prepare_kernels(merged[:-1])  # the trace ends inside the last replay
    assert [last - first for first, last in cut.runs.by_stream[7]] == [2] * 7 + [1]
    odd = [(n, s, e, 7, True) for n, s, e, *_ in merged[:5]] + [("other", 10**9, 10**9 + 1, 7, True)]
    assert len(prepare_kernels(odd).runs.by_stream[7]) == 1  # no period: one replay


def test_a_side_stream_with_fewer_replays_is_not_paired() -> None:
    host, calls, rows = replay_trace(first_after_begin_us=390, side_stream=True)
    est = estimate_from_events(host, rows, replays=calls)
    assert est.lo_ns == 400 * US - GRAPH_SUBMIT_SLACK_NS - 390 * US and est.n_replays == 8


def test_nested_replay_calls_count_once_as_the_innermost() -> None:
    outer = HostCall("CUDAGraph.replay (graphs.py:137)", 0, 500)
    inner = HostCall("torch._C.replay", 10, 480)
    later = HostCall("torch._C.replay", 600, 900)
    assert innermost([later, outer, inner]) == (inner, later)


def test_replay_calls_are_read_from_the_report(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "name": "CUDAGraph.replay (/x/torch/cuda/graphs.py:137)", "ts": 10.0, "dur": 50.0,
         "pid": 1, "tid": 1},
        {"ph": "X", "name": "torch._C.replay", "ts": 12.5, "dur": 40.0, "pid": 1, "tid": 1},
        {"ph": "X", "name": "cudaGraphLaunch", "ts": 100.0, "dur": 3.0, "pid": 1, "tid": 1},
        {"ph": "i", "name": "torch._C.replay", "ts": 200.0, "pid": 1, "tid": 1},
        {"ph": "X", "name": "log", "ts": 300.0, "dur": 1.0, "pid": 1, "tid": 1,
         "args": {"name": "torch._C.replay"}},
    ]
    path = tmp_path / "r.viztracer.json"
    path.write_text(json.dumps({"traceEvents": events, "viztracer_metadata": {}}))
    calls = read_replay_calls(path)
    assert calls == (HostCall("torch._C.replay", 12_500, 52_500), HostCall("cudaGraphLaunch", 100_000, 103_000))


def test_a_wide_interval_is_warned_about(tmp_path: Path) -> None:
    host, calls, rows = replay_trace(first_after_begin_us=300)
    viz = tmp_path / "r.viztracer.json"
    events = [{"ph": "X", "name": c.name, "ts": c.begin_ns / US, "dur": (c.end_ns - c.begin_ns) / US,
               "pid": 1, "tid": 1} for c in calls]
    viz.write_text(json.dumps({"traceEvents": events, "viztracer_metadata": {}}))
    evidence = RankEvidence("TP0", viz, None, tmp_path / "r.proton.chrome_trace", None,
                            prepare_kernels(rows), host)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TokentraceWarning)
        alignment = align(AlignRequest(), evidence)
    assert alignment.width_ns == 302 * US
    assert alignment.evidence == ("lower: graph replay (torch._C.replay); "
                                  "upper: device sync (torch._C._cuda_synchronize)")
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2 and "known to 302.0 µs only" in messages[1]


def test_a_stream_wait_does_not_bound_through_replays() -> None:
    # Tensor.tolist of a tensor copied earlier (overlap scheduling) returns while the replay just
    # launched still runs: taken as a wait for it, it would put the upper bound below the truth (0)
    host, calls, rows = replay_trace(first_after_begin_us=390)
    last = calls[-1]
    early = HostCall("Tensor.tolist", last.end_ns + 1 * US, last.end_ns + 2 * US)
    est = estimate_from_events(HostEvents((), (early, *host.waits)), rows, replays=calls)
    assert est.lo_ns <= 0 <= est.hi_ns == 2 * US
