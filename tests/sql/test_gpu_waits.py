"""GPU-side waits (issue 44) on other projects' real traces: a kernel launched in time that sat
queued on the GPU is a `gpu_queued` gap with cause `gpu_wait` and what it waited on, the host
thread blocked behind it the victim; a graph launched before its first node ran is no
`graph_replay`.

* SGLang decode on MI300X (TraceLens, tests/data/peers/tracelens__sglang_decode_*): the GPU
  idles 463.3 ms after its first kernel; the next kernel was launched 38 µs into the gap behind a
  `hipStreamWaitEvent` on an event no call of the trace records, while the scheduler thread sat in
  a synchronous copy (`hipMemcpyWithStream`) in `populate_from_forward_batch`.
* HTA's negative_queue_length trace (A100, 70 `cudaGraphLaunch`, ../shared/traces/peers): graphs
  queued 40-200 ms before their first node ran."""

from __future__ import annotations

import pandas as pd
import pytest

from support.analysis_fixtures import run_analyze
from support.paths import DATA, SHARED_TRACES
from tokentrace.catalog import open_trace

pytestmark = pytest.mark.slow  # real traces

SGLANG = DATA / "peers" / "tracelens__sglang_decode__sglang_Qwen3-8B_decode.json.gz"
QUEUED_GRAPHS = SHARED_TRACES / "peers" / "hta__negative_queue_length_values_check__rank0.json.gz"


def _tables(run, *names):
    return [pd.read_parquet(run.output / "tables" / f"{name}.parquet") for name in names]


def test_a_kernel_queued_behind_a_stream_wait_is_a_gpu_wait(tmp_path):
    run = run_analyze(SGLANG, tmp_path / "out", "--no-plots")
    assert run.exit_code == 0, run.stdout
    causes, budget = _tables(run, "gap_causes", "idle_budget")
    gap = causes.sort_values("dur").iloc[-1]
    assert gap.dur == 463_295_405  # the long gap, to the ns (its ends are the raw trace's)
    assert (gap.gap_class, gap.phase, gap.by_host, gap.host_caused_ns) == ("gpu_queued", "steady", 0, 0)
    assert (gap.cause_kind, gap.cause_call) == ("gpu_wait", "hipStreamWaitEvent")
    assert pd.isna(gap.cause_function) and gap.is_stall == 0  # the host is not the cause
    assert gap.victim_frame.startswith("populate_from_forward_batch (")
    assert gap.label == ("gpu_wait: hipStreamWaitEvent, on an event recorded before the trace began, "
                         "the host meanwhile in populate_from_forward_batch (hipMemcpyWithStream)")
    idle = budget.set_index("category").idle_ns
    assert idle.sum() == 463_977_017  # exact (peers README)
    host_or_startup = idle.get("startup", 0) + sum(v for k, v in idle.items() if k.startswith("host_"))
    assert host_or_startup <= 0.10 * idle.sum()
    assert idle["gpu_wait"] == 463_295_405


@pytest.mark.skipif(not QUEUED_GRAPHS.is_file(), reason="shared peer traces not present")
def test_idle_before_a_queued_graphs_first_node_is_no_graph_replay(tmp_path):
    run = run_analyze(QUEUED_GRAPHS, tmp_path / "out", "--no-plots")
    assert run.exit_code == 0, run.stdout
    (gaps,) = _tables(run, "gap_causes")
    replayed = gaps[gaps.launch_source == "graph_replay"]
    before_first_node = replayed[replayed.launch_end_ts < replayed.ts]  # launched before the gap
    running = before_first_node[before_first_node.gap_class == "graph_replay"]
    queued = before_first_node[before_first_node.gap_class != "graph_replay"]
    # the graph ran no node yet: a GPU-side wait, named by its launch
    assert len(queued) >= 25 and queued.dur.sum() > 420e6
    assert set(queued.gap_class) <= {"gpu_queued", "launch_overhead"}
    long = queued[queued.gap_class == "gpu_queued"]
    assert (long.cause_kind == "gpu_wait").all()
    # the graph's launch, or a stream wait issued before it (its stream waited on an event)
    assert set(long.cause_call) <= {"cudaGraphLaunch", "cudaStreamWaitEvent"}
    by_launch = long[long.cause_call == "cudaGraphLaunch"]
    assert len(by_launch) >= 25 and by_launch.label.str.contains("ms before its first node ran").all()
    # graph_replay: the kernel before the gap is a node of the same replay
    assert len(running) > 0 and (running.by_host == 0).all()


def test_each_victim_is_the_deepest_slice_open_at_the_gaps_middle(merged_sets):
    """Every gap of two real ranks taken as `gpu_queued`: the victims the lookup finds (the slice
    that started last before the gap's middle, and its parents) are those a scan of all the
    thread's slices finds, the deepest open at the middle (for the frame: of the engine's own
    code)."""
    _, path, _ = merged_sets("sample_t39_tp2")
    with open_trace(path, warn=False) as engine:
        engine.query("INCLUDE PERFETTO MODULE tokentrace.gpu_waits")
        engine.query("""
            CREATE PERFETTO TABLE _all_queued AS
            SELECT id, rank, ts, dur, next_kernel, next_kernel_ts, launch_name, launch_end_ts, launch_ts,
                   launch_source, 'gpu_queued' AS gap_class
            FROM tt_gpu_gap_rows(0, 0, 0)""")
        found = engine.query("SELECT gap_id, victim_frame, victim_call FROM tt_gpu_wait_causes!(_all_queued)")
        scanned = engine.query("""
            SELECT
              g.id AS gap_id,
              (SELECT s.name FROM thread_track AS t JOIN slice AS s ON s.track_id = t.id
               WHERE t.utid = i.host_utid AND s.ts <= g.ts + g.dur / 2 AND s.ts + s.dur >= g.ts + g.dur / 2
                 AND s.name GLOB '* (*:*)' AND NOT _tt_is_library_frame!(s.name)
               ORDER BY s.depth DESC LIMIT 1) AS victim_frame,
              (SELECT s.name FROM thread_track AS t JOIN slice AS s ON s.track_id = t.id
               WHERE t.utid = IFNULL((SELECT lt.utid FROM slice AS ls
                                      JOIN thread_track AS lt ON lt.id = ls.track_id
                                      WHERE ls.id = k.launch_id), i.host_utid)
                 AND s.ts <= g.ts + g.dur / 2 AND s.ts + s.dur >= g.ts + g.dur / 2
               ORDER BY s.depth DESC LIMIT 1) AS victim_call
            FROM _all_queued AS g
            JOIN tt_gpu_idle AS i ON i.id = g.id
            JOIN tt_kernels AS k ON k.id = i.next_kernel_id""")
    found, scanned = (df.sort_values("gap_id").reset_index(drop=True) for df in (found, scanned))
    assert len(found) == len(scanned) > 100
    assert found.victim_frame.notna().sum() > 100 and found.victim_call.notna().sum() > 100
    pd.testing.assert_frame_equal(found, scanned)
