"""`tokentrace.setup` on a tiny inline trace: an early gap is `startup` only when the host shows
set-up in it (a set-up call by name, a first call many times longer than the next, a one-off
call about as long as the gap) or shows nothing; with the host in its ordinary step code it is
`steady` (issue 44, item 2).

TP0's kernels k1..k5 each follow a launch 5 µs before them; the gaps before k2..k5 (90 µs each)
hold, on the launching thread: a one-off `torch.randint` of 80 µs; the first `forward` (80 µs,
the next one 5 µs); a `step` of 80 µs that recurs as long; `cuModuleLoadData`. The loop frame
(one-off, [0, 405)) outlasts every gap. After it, `nvjet_x` at 500 has no launch call and the host
shows nothing (µs)."""

from __future__ import annotations

import pytest

from support.tiny_traces import frame, kernel, rank, rows, tiny_engine

GAPS = "SELECT gap_index, kernels_before, gap_class, phase FROM tt_gpu_gaps!(0, 10000, {startup_kernels})"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    events = [
        *rank("TP0", 10, 20),
        frame("loop (a.py:1)", 0, 405, 10),
        frame("torch.randint", 12, 80, 10),
        frame("forward (a.py:5)", 112, 80, 10), frame("forward (a.py:5)", 402, 2, 10),
        frame("step (a.py:9)", 212, 80, 10), frame("step (a.py:9)", 600, 80, 10),
        frame("cuModuleLoadData", 312, 80, 10),
        *[frame("cuda_utils.launch", ts, 1, 10) for ts in (95, 195, 295, 395)],
        kernel("k1", 0, 10, 20), kernel("k2", 100, 10, 20), kernel("k3", 200, 10, 20),
        kernel("k4", 300, 10, 20), kernel("k5", 400, 10, 20), kernel("nvjet_x", 500, 10, 20),
    ]
    with tiny_engine(tmp_path_factory.mktemp("setup"), events) as engine:
        yield engine


def test_startup_only_on_evidence(engine):
    assert rows(engine, "gaps", GAPS.format(startup_kernels=10)) == [
        (1, 1, "host_late", "startup"),  # a one-off torch.randint over the gap
        (2, 2, "host_late", "startup"),  # the first forward, 16x its next call
        (3, 3, "host_late", "steady"),  # a step like every other
        (4, 4, "host_late", "startup"),  # a module load
        (5, 5, "host_late", "startup"),  # the host shows nothing
    ]
    # past the first startup_kernels kernels, evidence or not, every gap is steady
    assert [row[3] for row in rows(engine, "gaps", GAPS.format(startup_kernels=2))] == [
        "startup", "steady", "steady", "steady", "steady"]


@pytest.mark.parametrize(("name", "expected"), [
    ("cuModuleLoadData", 1), ("cuLibraryLoadData", 1), ("hipModuleLoad", 1), ("cuInit", 1),
    ("ncclCommInitRank", 1), ("_lazy_init (torch/cuda/__init__.py:300)", 1),
    ("compile_fx (/x/site-packages/torch/_inductor/compile_fx.py:1)", 1),
    ("_compile (/x/site-packages/torch/_dynamo/convert_frame.py:1)", 1),
    ("compile (/x/site-packages/triton/compiler/compiler.py:1)", 1),
    ("_fn (/x/site-packages/torch/_dynamo/eval_frame.py:1)", 0),  # runs at every compiled call
    ("cudaLaunchKernel", 0), ("forward (a.py:5)", 0),
])
def test_setup_call_names(engine, name, expected):
    assert rows(engine, "setup", f"SELECT _tt_is_setup_call!('{name}')") == [(expected,)]
