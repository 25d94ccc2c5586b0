"""Other projects' torch-profiler traces (HTA's and TraceLens's test data, tests/data/peers/:
copies, or a cut-down one) get a report or a one-line refusal that fits them: one
kernel with zero idle is a report, not a crash; a PyTorch Execution Trace is refused by name; a
2022 trace is read; a vLLM graph-capture trace is called one, with no stall in the capture and
no CUDA-graph advice; no VizTracer advice where no VizTracer report was given. A hand-written
capture with host frames over it shows that a capture's gap is no stall."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from support.analysis_fixtures import run_analyze
from support.paths import DATA
from tokentrace.report.html import cause_sentence
from tokentrace.report.tables import health_warnings, rank_table

PEERS = DATA / "peers"
TRITON = PEERS / "hta__triton_example__triton_example.json.gz"  # HTA tests/data/triton_example
EXECUTION_TRACE = PEERS / "hta__execution_trace__benchmark_simple_add_et.json.gz"  # HTA tests/data/execution_trace
INFERENCE_2022 = PEERS / "hta__trace_file_list__inference_rank_1.json.gz"  # HTA tests/data/trace_file_list
# TraceLens tests/traces/vllm_decode_full/capture_traces/graph_capture_rank_0: every GPU event
# and graph call kept, the launches inside the capture cut to its first and last ten
CAPTURE = PEERS / "msg_tracelens_vllm_graph_capture_rank_0.pt.trace.json.gz"


def _summary(output):
    return pd.read_parquet(output / "tables" / "summary.parquet")


@pytest.mark.slow
def test_one_kernel_zero_idle_is_a_report(tmp_path):
    run = run_analyze(TRITON, tmp_path / "out")
    assert run.exit_code == 0, run.stdout
    row = _summary(run.output).iloc[0]
    assert (row["idle_ns"], row["stalls"]) == (0, 0)  # exact: one kernel, no gap
    assert "CUDA graphs would remove" not in run.stdout  # no idle, no advice
    assert (run.output / "report.html").is_file()


@pytest.mark.slow
def test_execution_trace_is_refused_by_name_in_one_line(tmp_path):
    run = run_analyze(EXECUTION_TRACE, tmp_path / "out")
    assert run.exit_code != 0
    line = next(t for t in run.stdout.splitlines() if "Execution Trace" in t)
    assert "a PyTorch Execution Trace, not a profiler trace; record with torch.profiler.profile(" in line
    assert "a not a" not in run.stdout and "Traceback" not in run.stdout


@pytest.mark.slow
def test_2022_trace_with_capitalised_categories_is_read(tmp_path):
    run = run_analyze(INFERENCE_2022, tmp_path / "out")
    assert "not a JSON trace" not in run.stdout and "Traceback" not in run.stdout
    assert run.exit_code == 0, run.stdout


@pytest.mark.slow
def test_graph_capture_trace_is_named_with_exact_idle_and_no_stall(tmp_path):
    run = run_analyze(CAPTURE, tmp_path / "out")
    assert run.exit_code == 0, run.stdout
    row = _summary(run.output).iloc[0]
    assert row["idle_ns"] == 57_766_588  # peers README: exact idle of the whole trace
    assert (row["trace_kind"], row["capture_calls"], row["graph_launch_calls"]) == ("graph_capture", 1, 0)
    assert row["stalls"] == 0 and row["host_caused_ns"] == 0
    assert re.search(r"^TP0: (most GPU idle is startup, [^;]*; )?graph-capture trace \(1 stream capture", run.stdout, re.M)
    assert "graph-capture trace" in (run.output / "report.html").read_text(encoding="utf-8")
    assert "CUDA graphs would remove" not in run.stdout


def _kineto_capture(path, with_frames: bool):
    """12 eager kernels, then a 5 ms stream capture (50 launches, none run), instantiation and
    two kernels; with a Python frame open over the capture when ``with_frames``."""
    events, ts, corr = [], 1000.0, 100

    def call(name, dur=2.0, kernel=False):
        nonlocal corr
        corr += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 7, "tid": 7, "ts": ts,
                       "dur": dur, "args": {"correlation": corr}})
        if kernel:
            events.append({"ph": "X", "cat": "kernel", "name": "void k(int)", "pid": 0, "tid": 7,
                           "ts": ts + 5, "dur": 4.0, "args": {"correlation": corr, "stream": 7}})
            events.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 7, "tid": 7,
                           "ts": ts, "bp": "e"})
            events.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 0, "tid": 7,
                           "ts": ts + 5, "bp": "e"})

    for _ in range(12):
        call("cudaLaunchKernel", kernel=True)
        ts += 10
    begin = ts
    call("cudaStreamBeginCapture", 1)
    ts += 3
    for _ in range(50):
        call("cudaLaunchKernel")
        ts += 100
    call("cudaStreamEndCapture")
    ts += 3
    call("cudaGraphInstantiate", 300)
    ts += 400
    end = ts
    for _ in range(2):
        call("cudaLaunchKernel", kernel=True)
        ts += 10
    if with_frames:
        events.append({"ph": "X", "cat": "python_function", "name": "runner.py(1): run", "pid": 7,
                       "tid": 7, "ts": 999.0, "dur": ts - 999.0 + 20, "args": {"Python id": 1}})
        events.append({"ph": "X", "cat": "python_function", "name": "runner.py(10): capture_graph",
                       "pid": 7, "tid": 7, "ts": begin - 0.5, "dur": end - begin,
                       "args": {"Python id": 2, "Python parent id": 1}})
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU"}],
                                "traceEvents": events, "traceName": "capture.pt.trace.json"}))
    return path


def test_no_stall_inside_a_capture_even_with_host_frames(tmp_path):
    # the 5.4 ms gap over the capture is steady and host-late, with a busy frame over it: a
    # stall but for the capture
    run = run_analyze(_kineto_capture(tmp_path / "capture.json", True), tmp_path / "out")
    assert run.exit_code == 0, run.stdout
    row = _summary(run.output).iloc[0]
    assert row["trace_kind"] == "graph_capture"
    assert (row["stalls"], row["short_gaps"], row["host_caused_ns"]) == (0, 0, 0)
    assert row["budget_startup_ns"] >= 5_000_000  # the capture's gap is set-up
    assert pd.isna(row["idle_hint"])  # a rank that captures graphs needs no advice to use them
    assert re.search(r"^TP0: (most GPU idle is startup, [^;]*; )?graph-capture trace \(1 stream capture", run.stdout, re.M)


_HEALTH = {"rank": "TP0", "stats_errors": 0, "stats_data_loss": 0, "kernels": 10,
           "kernels_with_launch": 0, "launch_coverage": 0.0, "kernels_with_flow": 0,
           "flow_coverage": 0.0, "is_merged": 1, "viz_overflow": 0, "host_slices": 5000,
           "host_min_dur_ns": 2000, "offset_interval_ns": None, "other_ranks": 0}


@pytest.mark.parametrize(("facts", "said", "unsaid"), [
    ({"align_method": "shared_clock", "gpu_format": "kineto", "proton_dialect": "kineto"},
     "no launch call with the same correlation id", "VizTracer"),
    ({"align_method": "anchors", "gpu_format": "kineto", "proton_dialect": "kineto"},
     "is VizTracer's report cut?", "correlation id"),
    ({"align_method": "estimated", "gpu_format": "proton", "proton_dialect": "3.8"},
     "triton <= 3.8 Proton records no launch flows", "correlation id"),
])
def test_missing_launches_are_explained_by_the_inputs_given(facts, said, unsaid):
    lines = [t for t in health_warnings(pd.DataFrame([_HEALTH | facts])) if "was not found" in t]
    assert len(lines) == 1 and said in lines[0] and unsaid not in lines[0]


def test_no_min_duration_advice_for_the_torch_profiler_alone():
    torch_only = _HEALTH | {"align_method": "shared_clock", "gpu_format": "kineto", "launch_coverage": 1.0,
                            "kernels_with_launch": 10, "flow_coverage": 1.0, "kernels_with_flow": 10}
    assert not [t for t in health_warnings(pd.DataFrame([torch_only])) if "min_duration" in t]
    with_viz = torch_only | {"align_method": "anchors"}
    assert [t for t in health_warnings(pd.DataFrame([with_viz])) if "min_duration" in t]


def test_rank_table_without_idle_rows():
    windows = pd.DataFrame({"rank": ["TP0"], "idle_ns": [0]})
    summary = pd.DataFrame({"rank": ["TP0"], "stalls": [0]})
    budget = pd.DataFrame({"rank": ["TP0"], "category": ["short_gaps"], "idle_ns": [0], "share": [0.0],
                           "hint": [None], "gaps_per_step": [None], "idle_per_step_ns": [None]})
    table = rank_table(windows, summary, budget)
    assert pd.isna(table.loc[0, "idle_budget"]) and table.loc[0, "budget_short_gaps_ns"] == 0


def test_capture_sentence_without_stalls():
    row = pd.Series({"rank": "TP1", "top_function": None, "trace_kind": "graph_capture", "capture_calls": 3,
                     "short_top_function": None, "idle_ns": 10, "idle_share": 0.5, "idle_startup_ns": 10})
    assert cause_sentence(row).startswith("TP1: graph-capture trace (3 stream captures, no graph replay")
    assert "no host stall outside the captures" in cause_sentence(row)
