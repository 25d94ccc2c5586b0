"""`tokentrace.gaps` on a tiny inline trace: busy intervals (kernels of all streams merged), the
gaps between them with their class and host-caused part, and `tt_gap_class` on its own.

TP0: k1 [0,10) and k2 [5,20) on two streams; k3 [100,110) launched by a call at 90 (inside the
gap: host_late, 70 µs host-caused); k4 [115,120) by a call at 105 (before its 5 µs gap:
launch_overhead); k5 [300,310) by a call at 116 (before its gap: gpu_queued); nvjet_x [500,510) has no torch
call (no_link). The host's loop frame spans [0,400) (µs)."""

from __future__ import annotations

import pytest

from support.tiny_traces import US, frame, kernel, rank, rows, tiny_engine

GAPS = """SELECT rank, gap_index, ts, dur, prev_kernel, next_kernel, launch_ts, launch_source,
  gap_class, host_caused_ns, kernels_before, phase, by_host, class_uncertain
FROM tt_gpu_gaps!({min_ns}, 10000, 3)"""


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    events = [
        *rank("TP0", 10, 20),
        frame("loop (a.py:1)", 0, 400, 10),
        *[frame("cuda_utils.launch", ts, 1, 10) for ts in (90, 105, 116)],
        kernel("k1", 0, 10, 20), kernel("k2", 5, 15, 20, stream=3),
        kernel("k3", 100, 10, 20), kernel("k4", 115, 5, 20), kernel("k5", 300, 10, 20),
        kernel("nvjet_x", 500, 10, 20),
    ]
    with tiny_engine(tmp_path_factory.mktemp("gaps"), events) as engine:
        yield engine


def test_busy_intervals(engine):
    assert rows(engine, "gaps", "SELECT rank, busy_index, ts, dur, kernels FROM tt_gpu_busy") == [
        ("TP0", 1, 0, 20 * US, 2), ("TP0", 2, 100 * US, 10 * US, 1), ("TP0", 3, 115 * US, 5 * US, 1),
        ("TP0", 4, 300 * US, 10 * US, 1), ("TP0", 5, 500 * US, 10 * US, 1)]


def test_gaps_classified(engine):
    assert rows(engine, "gaps", GAPS.format(min_ns=0)) == [
        # (steady: the host shows no set-up in it, only its loop frame; see test_setup.py)
        ("TP0", 1, 20 * US, 80 * US, "k2", "k3", 90 * US, "triton_launch", "host_late", 70 * US, 2, "steady", 1, 0),
        ("TP0", 2, 110 * US, 5 * US, "k3", "k4", 105 * US, "triton_launch", "launch_overhead", 0, 3, "steady", 0, 0),
        ("TP0", 3, 120 * US, 180 * US, "k4", "k5", 116 * US, "triton_launch", "gpu_queued", 0, 4, "steady", 0, 0),
        ("TP0", 4, 310 * US, 190 * US, "k5", "nvjet_x", None, None, "no_link", None, 5, "steady", 0, 0)]
    assert [row[:4] for row in rows(engine, "gaps", GAPS.format(min_ns=50 * US))] == [
        ("TP0", 1, 20 * US, 80 * US), ("TP0", 2, 120 * US, 180 * US), ("TP0", 3, 310 * US, 190 * US)]


@pytest.mark.parametrize(("launch", "source", "in_replay", "expected"), [
    ((None, None), None, 0, "no_link"),
    ((90, 95), "triton_launch", 0, "host_late"),  # the call ended after the GPU went idle
    ((80, 85), "triton_launch", 0, "launch_overhead"),  # before the gap, gap <= 10
    ((80, 85), "proton_scope", 0, "launch_overhead"),
    ((10, 20), "host_call", 0, "launch_overhead"),
    ((90, 95), "graph_replay", 0, "host_late"),  # the replay began in the gap
    ((80, 95), "graph_replay", 0, "graph_replay"),  # began before it, still open: in time
    ((70, 80), "graph_replay", 1, "graph_replay"),  # a node of the replay before the gap
    ((70, 80), "graph_replay", 0, "launch_overhead"),  # a graph's first node waited to start
    ((None, None), "stream_order", 0, "host_late"),
])
def test_gap_class_function(engine, launch, source, in_replay, expected):
    sql = lambda value: "NULL" if value is None else repr(value)  # noqa: E731
    got = rows(engine, "gaps", f"SELECT tt_gap_class(90, 10, {sql(launch[0])}, {sql(launch[1])}, "
                               f"{sql(source)}, 10, {in_replay})")
    assert got == [(expected,)]
    if expected == "launch_overhead":  # a longer gap: the GPU queued the launched kernel
        assert rows(engine, "gaps", f"SELECT tt_gap_class(90, 11, {launch[0]}, {launch[1]}, "
                                    f"'{source}', 10, {in_replay})") == [("gpu_queued",)]


@pytest.mark.parametrize(("source", "launch_end", "expected"), [
    ("runtime_call", 1_000 + 38_000, "gpu_queued"),  # launched 38 us in, then queued 462 ms
    ("triton_launch", 1_000 + 38_000, "gpu_queued"),
    ("graph_replay", 1_000 + 38_000, "gpu_queued"),
    ("host_call", 1_000 + 38_000, "host_late"),  # a guess: its end proves nothing
    ("runtime_call", 1_000 + 300_000_000, "host_late"),  # the host took longer than the wait
])
def test_a_kernel_queued_after_a_launch_in_the_gap_is_gpu_side(engine, source, launch_end, expected):
    # gap [1 us, 463 ms]; the launch call began 30 us in
    got = rows(engine, "gaps", f"SELECT tt_gap_class(1000, 463000000, 31000, {launch_end}, "
                               f"'{source}', 10000, 0)")
    assert got == [(expected,)]
