"""The torch-profiler (Kineto) reader and its host timeline, on the shared H200 traces
(`engine_kineto*`: serve_engine under torch 2.11's profiler) and on small hand-made cases."""

from __future__ import annotations

import collections

import pytest

from support.paths import SHARED_TRACES
from support.trace_files import load_json
from tokentrace.sources.kineto import GPU_CATEGORIES, read_kineto
from tokentrace.sources.kineto_host import frame_name, host_from_python, nest
from tokentrace.sources.kineto_links import with_arrows

STACK = SHARED_TRACES / "engine_kineto_stack" / "engs-TP0.trace.json.gz"
WITH_VIZ = SHARED_TRACES / "engine_kineto" / "engk-TP0.trace.json.gz"
needs_shared = pytest.mark.skipif(not STACK.is_file(), reason="shared Kineto traces not present")


@needs_shared
@pytest.mark.parametrize("path", [WITH_VIZ, STACK], ids=["engine_kineto", "engine_kineto_stack"])
@pytest.mark.slow
def test_every_gpu_activity_keeps_its_launch_arrow(path):
    raw = load_json(path)["traceEvents"]
    counts = collections.Counter(e.get("cat") for e in raw if e.get("ph") == "X")
    trace = read_kineto(path).gpu
    assert trace.dialect == "kineto" and trace.base_ns == load_json(path)["baseTimeNanoseconds"]
    assert trace.n_kernels == counts["kernel"] > 50_000
    # one s/f pair per GPU activity, drawn from the call with its correlation id (a graph
    # launch's call gets one s per kernel of its replay)
    activities = sum(counts[c] for c in GPU_CATEGORIES)
    assert trace.n_flows == activities
    arrows = with_arrows(trace.events, trace.launch_pairs)
    finishes = [e for e in arrows if e.ph == "f"]
    starts = [e for e in arrows if e.ph == "s"]
    assert len(finishes) == len(starts) == activities
    assert sorted(e.flow_pair for e in finishes) == sorted(e.flow_pair for e in starts) == list(range(activities))
    # every activity's correlation id is a launch call's: none is left without its arrow
    # (Kineto's ~1k flow ends on host calls, which have no start, are no launch arrows)
    assert trace.unpaired_flows == 0


@needs_shared
@pytest.mark.slow
def test_graph_replays_are_not_launch_evidence():
    trace = read_kineto(WITH_VIZ).gpu
    assert len(trace.replay_correlations) == 187  # cudaGraphLaunch calls, one per decode step
    launched = trace.kernels()
    assert 0 < len(launched) < trace.n_kernels // 4
    assert {name for name, *_ in launched} >= {"rmsnorm_kernel", "silu_mul_kernel"}


@needs_shared
@pytest.mark.slow
def test_lanes_are_named_by_role():
    names = set(read_kineto(STACK, python_apart=False).gpu.lane_names.values())
    assert {"GPU Stream 7", "GPU Stream 7 annotations", "CPU Thread 1209 (torch profiler)",
            "Python thread 1209 (torch profiler)", "torch profiler"} <= names


@needs_shared
@pytest.mark.slow
def test_python_calls_become_nested_host_frames():
    trace = read_kineto(STACK, python_apart=True)
    raw = [e for e in load_json(STACK)["traceEvents"] if e.get("cat") == "python_function"]
    host = host_from_python(trace.python, trace.host_pid, trace.thread_names)
    assert len(host.names) == len(raw) == 229_640  # nothing dropped
    assert set(host.tids) == {1209, 1238} and trace.launch_tid == 1209
    assert "flush_request_log (serve_engine.py:208)" in host.names
    assert not any(e.ph == "X" and e.raw.get("cat") == "python_function" for e in trace.gpu.events)
    by_thread = collections.defaultdict(list)
    for tid, start, end in zip(host.tids, host.starts_ns, host.ends_ns):
        by_thread[tid].append((start, -end, end))
    for rows in by_thread.values():  # strictly nested on every thread
        stack = []
        for start, _, end in sorted(rows):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1]
            stack.append(end)


@pytest.mark.parametrize(("kineto", "viztracer"), [
    ("serve_engine.py(208): flush_request_log", "flush_request_log (serve_engine.py:208)"),
    ("threading.py(1030): _bootstrap", "_bootstrap (<stdlib>/threading.py:1030)"),
    ("json/encoder.py(205): iterencode", "iterencode (<stdlib>/json/encoder.py:205)"),
    ("transformers/generation/utils.py(2564): _sample", "_sample (transformers/generation/utils.py:2564)"),
    ("<built-in method item of Tensor object at 0x7f59c0bfd650>", "Tensor.item"),
    ("<built-in method acquire of _thread.lock object at 0x7f59bf7c9640>", "_thread.lock.acquire"),
    ("<built-in method tolist of Tensor object at 0x7f55a4fe7610>", "Tensor.tolist"),
    ("<built-in function sleep>", "sleep"),
    ("<built-in method replay of pybind11_builtins.pybind11_detail_function_record_v1_system_libstdcpp_gxx_abi"
     "_1xxx_use_cxx11_abi_1 object at 0x7f59c0bfce90>", "replay"),
    ("aten::mm", "aten::mm"),
    # the collector's entry point, for the gc rule; a module annotation is a scope, not a C call
    ("<built-in function collect>", "gc.collect"),
    ("nn.Module: ServingLlama_0", "nn.Module: ServingLlama_0 (<nn.Module>:0)"),
])
def test_frame_names_follow_viztracer(kineto, viztracer):
    assert frame_name(kineto) == viztracer


def test_nest_clips_partial_overlaps_only():
    # a call ending 3 ns after its caller; a sibling starting before the previous one ended
    starts, ends = [0, 10, 50, 60], [100, 103, 70, 65]
    new_ends, clipped = nest(starts, ends)
    assert new_ends == [100, 100, 70, 65] and clipped == 1
    assert nest([0, 5], [10, 20]) == ([10, 10], 1)
