"""The stall SQL on a tiny hand-written merged trace (`traces/edge_cases.json`), times in µs:

TP0 kernels: k1 [0,10) and k2 [10,20) back to back on stream 7, k3 [15,30) overlapping on stream
8, k4 [130,140) launched by scope `attention` opened at 50 (after the GPU went idle at 30:
host_late, 20 µs host-caused), k5 [145,150) launched at 100 (before its 5 µs gap:
launch_overhead), k6 [300,310) launched at 120 (before its 150 µs gap: gpu_queued, steady
however few kernels ran before), k7
[500,510) without flow (no_link). Steps: `decode_step` scopes [0,200) and [200,600), so the gap
[150,300) straddles a window edge and [510,600) is idle outside the GPU's active window.
Host thread: `host_stall` (sleeping in the C call `time.sleep`) over [25,120), `tokenize`
[120,135), `callback` [330,380) called from a C frame. TP1 has host frames but no kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokentrace.catalog import open_trace, run_query
from tokentrace.errors import QueryError

TRACE = Path(__file__).parent / "traces" / "edge_cases.json"
US = 1000


@pytest.fixture(scope="module")
def edge():
    with open_trace(TRACE, warn=False) as engine:
        assert engine.stats_problems().empty
        yield engine


def test_gaps_classes_and_edges(edge):
    gaps = run_query(edge, "gpu_gaps")
    assert gaps["rank"].unique().tolist() == ["TP0"]  # TP1: no kernels, no gaps
    assert gaps[["ts", "dur", "gap_class"]].values.tolist() == [
        [30 * US, 100 * US, "host_late"], [150 * US, 150 * US, "gpu_queued"],
        [310 * US, 190 * US, "no_link"]]
    assert gaps.gap_index.tolist() == [1, 2, 3]
    first = gaps.iloc[0]
    assert first.prev_kernel == "k3_other_stream"  # streams merged: k3 ends last
    assert (first.next_kernel, first.launch_name) == ("k4_host_late", "attention")
    assert first.launch_source == "proton_scope"
    assert first.host_caused_ns == 20 * US and first.launch_ts == 50 * US
    assert first.unix_ts == 1_000_000_000_000 + 30 * US
    assert gaps.host_caused_ns.tolist()[1] == 0 and gaps.host_caused_ns.isna().tolist()[2]
    assert gaps.launch_ts.isna().tolist() == [False, False, True]
    assert (gaps.end_ts == gaps.next_kernel_ts).all()
    # k1-k3 before the first gap, k4-k5 before the second (k5's 5 µs gap is under the minimum)
    assert gaps.kernels_before.tolist() == [3, 5, 6]
    # default startup_kernels 10; k6 was launched before its gap (gpu_queued): never set-up
    assert gaps.phase.tolist() == ["startup", "steady", "startup"]
    assert gaps.by_host.tolist() == [1, 0, 0]  # no_link: nothing on the host explains k7
    phases = run_query(edge, "gpu_gaps", {"startup_kernels": 4}).phase.tolist()
    assert phases == ["startup", "steady", "steady"]
    assert (run_query(edge, "gpu_gaps", {"startup_kernels": 0}).phase == "steady").all()


def test_gap_parameters_at_their_edges(edge):
    every = run_query(edge, "gpu_gaps", {"min_gap_us": 0})
    assert every.gap_class.tolist() == ["host_late", "launch_overhead", "gpu_queued", "no_link"]
    assert every.dur.min() == 5 * US  # back-to-back kernels leave no zero-length gap
    assert run_query(edge, "gpu_gaps", {"min_gap_us": "5us"}).shape[0] == 4
    no_overhead = run_query(edge, "gpu_gaps", {"min_gap_us": 0, "launch_overhead_us": 0})
    assert no_overhead.gap_class.tolist()[1] == "gpu_queued"
    assert run_query(edge, "gpu_gaps", {"min_gap_us": "1s"}).empty
    assert run_query(edge, "gpu_gaps", {"rank": "TP1"}).empty
    assert run_query(edge, "gpu_gaps", {"rank": "TP0"}).shape[0] == 3
    for query in ("gpu_gaps", "host_stalls", "host_stall_profile", "step_breakdown"):
        with pytest.raises(QueryError, match="min_gap_us must be >= 0"):
            run_query(edge, query, {"min_gap_us": -1})
        with pytest.raises(QueryError, match="launch_overhead_us must be >= 0"):
            run_query(edge, query, {"launch_overhead_us": "-1us"})
    with pytest.raises(QueryError, match="top must be >= 1"):
        run_query(edge, "host_stalls", {"top": 0})
    for query in ("gpu_gaps", "gpu_windows", "host_stalls", "host_stall_profile"):
        with pytest.raises(QueryError, match="startup_kernels must be >= 0"):
            run_query(edge, query, {"startup_kernels": -1})
    with pytest.raises(QueryError, match="max_gap_us must be >= 0"):
        run_query(edge, "host_stall_profile", {"max_gap_us": -1})


def test_host_stalls_leaf_and_rollup(edge):
    frames = run_query(edge, "host_stalls")
    first = frames[frames.gap_index == 1]
    assert first[["function", "self_ns", "total_ns"]].values.tolist() == [
        ["host_stall", 90 * US, 90 * US],      # time.sleep counts for its Python caller
        ["tokenize", 10 * US, 10 * US],        # builtins.hash likewise
        ["decode_loop", 0, 100 * US],          # callers: rolled up, no self time
        ["scheduler_step", 0, 100 * US]]
    assert first.frame.tolist()[0] == "host_stall (sim.py:3)" and first.depth.tolist()[0] == 2
    assert first.self_share.tolist()[0] == pytest.approx(0.9)
    last = frames[frames.gap_index == 3]  # `callback` is called from a C frame
    assert last[["function", "self_ns"]].values.tolist() == [
        ["decode_loop", 140 * US], ["callback", 50 * US]]
    assert run_query(edge, "host_stalls", {"top": 1}).frame_rank.max() == 1


def test_host_stall_profile_totals(edge):
    # every host-side gap of this tiny trace is a start-up gap (fewer than 10 kernels before
    # it); the gpu_queued one is steady wherever it lies
    assert run_query(edge, "host_stall_profile").gap_time_ns.unique().tolist() == [150 * US]
    assert run_query(edge, "host_stall_profile", {"include_startup": True}).equals(
        run_query(edge, "host_stall_profile", {"startup_kernels": 0}))
    profile = run_query(edge, "host_stall_profile", {"startup_kernels": 0})
    assert profile.frame_rank.tolist() == [1, 2, 3, 4, 5]
    assert profile[["function", "gaps", "self_ns", "total_ns"]].values.tolist() == [
        ["decode_loop", 3, 290 * US, 440 * US], ["host_stall", 1, 90 * US, 90 * US],
        ["callback", 1, 50 * US, 50 * US], ["tokenize", 1, 10 * US, 10 * US],
        ["scheduler_step", 1, 0, 100 * US]]
    assert (profile.gap_time_ns == 440 * US).all() and (profile.rank_gaps == 3).all()
    assert profile.idle_share.sum() == pytest.approx(1.0)
    host = run_query(edge, "host_stall_profile", {"startup_kernels": 0, "host_only": True})
    assert host[["function", "self_ns"]].values.tolist()[0] == ["host_stall", 90 * US]
    assert (host.gap_time_ns == 100 * US).all()  # the host_late gap only
    short = run_query(edge, "host_stall_profile", {"startup_kernels": 0, "max_gap_us": 150})
    assert (short.gap_time_ns == 100 * US).all()  # only the 100 µs gap is shorter than 150 µs


def test_gpu_windows(edge):
    windows = run_query(edge, "gpu_windows")
    assert windows[["rank", "first_ts", "last_end_ts", "kernels", "busy_ns"]].values.tolist() == [
        ["TP0", 0, 510 * US, 7, 65 * US]]  # [0,30) [130,140) [145,150) [300,310) [500,510)
    row = windows.iloc[0]
    assert row.idle_ns == 445 * US and row.gap_idle_ns == 440 * US and row.gaps == 3  # + 5 µs short
    assert (row.idle_host_late_ns, row.idle_gpu_queued_ns, row.idle_no_link_ns) == (
        100 * US, 150 * US, 190 * US)
    assert row.idle_startup_ns == 290 * US and row.idle_host_steady_ns == 0  # gpu_queued: steady
    assert run_query(edge, "gpu_windows", {"startup_kernels": 4}).idle_host_steady_ns[0] == 0


def test_step_breakdown_windows(edge):
    steps = run_query(edge, "step_breakdown", {"min_gap_us": 0})
    assert steps[["step_index", "ts", "dur", "gpu_busy_ns", "idle_ns"]].values.tolist() == [
        [1, 0, 200 * US, 45 * US, 155 * US], [2, 200 * US, 400 * US, 20 * US, 380 * US]]
    assert steps.idle_host_late_ns.tolist() == [100 * US, 0]
    assert steps.idle_launch_overhead_ns.tolist() == [5 * US, 0]
    assert steps.idle_gpu_queued_ns.tolist() == [50 * US, 100 * US]  # split at the window edge
    assert steps.idle_no_link_ns.tolist() == [0, 190 * US]
    assert steps.idle_outside_ns.tolist() == [0, 90 * US]
    short = run_query(edge, "step_breakdown")  # default 100 µs: the 5 µs gap is short
    assert short.idle_short_ns.tolist() == [5 * US, 0]
    assert short.idle_launch_overhead_ns.tolist() == [0, 0]
    host = run_query(edge, "step_breakdown", {"step_name": "scheduler_step"})
    assert host[["source", "ts", "dur"]].values.tolist() == [["host", 20 * US, 120 * US]]
    assert run_query(edge, "step_breakdown", {"step_name": "nothing"}).empty


def test_launch_latency_and_skews(edge):
    latency = run_query(edge, "launch_latency")
    assert latency[["kernel", "count", "p50_ns", "negatives"]].values.tolist() == [
        ["k6_gpu_queued", 1, 180 * US, 0], ["k4_host_late", 1, 80 * US, 0],
        ["k5_launch_overhead", 1, 45 * US, 0]]
    skew = run_query(edge, "rank_skew")
    assert skew[["step_index", "n_ranks", "first_rank", "start_skew_ns"]].values.tolist() == [
        [1, 1, "TP0", 0], [2, 1, "TP0", 0]]
    collectives = run_query(edge, "collective_skew", {"name_glob": "k*"})
    assert collectives.shape[0] == 7 and (collectives.n_ranks == 1).all()
    assert run_query(edge, "collective_skew").empty  # no NCCL kernel
