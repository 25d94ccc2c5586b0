"""`tokentrace.ranks` on tiny inline traces: the ranks of a merged trace (sorted by their
parallel indices), their processes, and the thread that launches kernels chosen by launch
evidence; a raw trace's processes as ranks."""

from __future__ import annotations

import pytest

from support.tiny_traces import frame, rank, rows, thread_name, tiny_engine

RANK = """
    SELECT r.rank, r.dp, r.tp, hp.pid AS host_pid, gp.pid AS gpu_pid, t.tid AS launch_tid,
      r.align_method, r.proton_dialect, r.is_merged
    FROM tt_ranks AS r
    JOIN process AS hp ON hp.upid = r.host_upid
    JOIN process AS gp ON gp.upid = r.gpu_upid
    LEFT JOIN thread AS t ON t.utid = r.host_main_utid"""


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    """DP1-TP0 (host 100, GPU 200): its main thread makes three Triton launcher calls, thread
    105 one. DP0-TP1 (host 300, GPU 400, estimated offset): its main thread only runs Python;
    worker thread 305 makes two launcher calls."""
    events = [
        *rank("DP1-TP0", 100, 200, dp=1, tp=0),
        *rank("DP0-TP1", 300, 400, dp=0, tp=1, align_method="estimated", proton_dialect="3.8"),
        thread_name(100, 105, "helper"), thread_name(300, 305, "worker"),
        frame("loop (a.py:1)", 0, 100, 100),
        *[frame("cuda_utils.launch", ts, 2, 100) for ts in (10, 20, 30)],
        frame("cuda_utils.launch", 40, 2, 100, 105),
        frame("serve (a.py:1)", 0, 100, 300),
        *[frame("cuda_utils.launch", ts, 2, 300, 305) for ts in (10, 20)],
    ]
    with tiny_engine(tmp_path_factory.mktemp("ranks"), events) as engine:
        yield engine


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    """No `tokentrace.rank` instant: one process (pid 7) with a slice, one (pid 8) without."""
    events = [{"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "python3"}},
              {"ph": "M", "name": "process_name", "pid": 8, "args": {"name": "idle"}},
              thread_name(8, 8, "MainThread"), frame("main (b.py:1)", 0, 50, 7)]
    with tiny_engine(tmp_path_factory.mktemp("ranks_raw"), events) as engine:
        yield engine


def test_merged_ranks_sorted_by_indices(merged):
    assert rows(merged, "ranks", RANK) == [
        ("DP0-TP1", 0, 1, 300, 400, 305, "estimated", "3.8", 1),  # the worker launches
        ("DP1-TP0", 1, 0, 100, 200, 100, "anchors", "3.9", 1)]


def test_rank_processes_and_launch_threads(merged):
    assert rows(merged, "ranks", """
        SELECT rp.rank, p.pid, rp.role FROM tt_rank_processes AS rp
        JOIN process AS p USING (upid) ORDER BY rp.rank, rp.role""") == [
        ("DP0-TP1", 400, "gpu"), ("DP0-TP1", 300, "host"),
        ("DP1-TP0", 200, "gpu"), ("DP1-TP0", 100, "host")]
    assert rows(merged, "ranks", """
        SELECT l.rank, t.tid, l.is_primary, l.strong FROM tt_launch_threads AS l
        JOIN thread AS t USING (utid) ORDER BY l.rank, t.tid""") == [
        ("DP0-TP1", 305, 1, 2), ("DP1-TP0", 100, 1, 3), ("DP1-TP0", 105, 0, 1)]


def test_raw_trace_processes_are_ranks(raw):
    assert rows(raw, "ranks", RANK + " ORDER BY r.rank") == [
        ("python3", None, None, 7, 7, 7, None, None, 0)]  # its main thread
    assert rows(raw, "ranks", """
        SELECT rp.rank, p.pid, rp.role FROM tt_rank_processes AS rp JOIN process AS p USING (upid)""") == [
        ("python3", 7, "process")]
