"""`tokentrace.launches` on a tiny inline trace: which host call or Proton scope launched each
kernel (by kind: Triton launcher calls for Triton kernels, replay calls for graph kernels, torch
calls for the rest; a flow's scope wins over an earlier call; a call that began less than 1 µs
before the kernel is not its launch)."""

from __future__ import annotations

import pytest

from support.tiny_traces import US, flow, frame, kernel, rank, rows, scope, tiny_engine


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    events = [
        *rank("TP0", 10, 20),
        frame("loop (a.py:1)", 0, 200, 10),
        frame("cuda_utils.launch", 40, 2, 10),
        frame("cuda_utils.launch", 60, 1, 10),
        frame("torch.matmul", 70, 5, 10),
        frame("torch._C.replay", 90, 5, 10),
        frame("Tensor.item", 140, 1, 10),  # waits for the GPU: no launch
        kernel("early_kernel", 5, 1, 20),  # before any call
        kernel("rmsnorm_kernel", 50, 2, 20),
        kernel("silu_kernel", 60.5, 2, 20),  # the call at 60 began 0.5 µs before it
        kernel("nvjet_sm90_gemm", 80, 5, 20),
        kernel("graph_kernel", 100, 5, 20, call_stack=["model", "<captured_at>"]),
        scope("attention", 120, 5, 20), *flow(1, 20, 122, 130),
        kernel("attn_kernel", 130, 5, 20),  # the launcher call at 60 is before its scope
    ]
    with tiny_engine(tmp_path_factory.mktemp("launches"), events) as engine:
        yield engine


def test_launch_calls(engine):
    assert rows(engine, "launches", "SELECT rank, ts, dur, kind, name FROM tt_launch_calls") == [
        ("TP0", 40 * US, 2 * US, "triton", "cuda_utils.launch"),
        ("TP0", 60 * US, 1 * US, "triton", "cuda_utils.launch"),
        ("TP0", 70 * US, 5 * US, "torch", "torch.matmul"),
        ("TP0", 90 * US, 5 * US, "graph", "torch._C.replay")]


def test_kernel_launches(engine):
    assert rows(engine, "launches", """
        SELECT k.name, k.kind, k.launch_ts, k.launch_end_ts, k.launch_source, k.launch_name, t.tid
        FROM tt_kernel_launches AS k JOIN thread AS t ON t.utid = k.launch_utid""") == [
        ("early_kernel", "triton", None, None, None, None, 10),
        ("rmsnorm_kernel", "triton", 40 * US, 42 * US, "triton_launch", "cuda_utils.launch", 10),
        ("silu_kernel", "triton", 40 * US, 42 * US, "triton_launch", "cuda_utils.launch", 10),
        ("nvjet_sm90_gemm", "torch", 70 * US, 75 * US, "host_call", "torch.matmul", 10),
        ("graph_kernel", "graph", 90 * US, 95 * US, "graph_replay", "torch._C.replay", 10),
        ("attn_kernel", "triton", 120 * US, 125 * US, "proton_scope", "attention", 10)]
    assert rows(engine, "launches", "SELECT rank, ts, end_ts FROM tt_host_windows") == [("TP0", 0, 200 * US)]
