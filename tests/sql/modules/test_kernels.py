"""`tokentrace.kernels` on a tiny inline trace: GPU slices of each rank's processes, their class
(`nccl` by name in any case, `memory` by category or name, else `compute`) and the Proton scope
their launch flow comes from."""

from __future__ import annotations

import pytest

from support.tiny_traces import US, flow, kernel, rank, rows, scope, tiny_engine


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    events = [
        *rank("TP0", 10, 20, tp=0), *rank("TP1", 30, 40, tp=1),
        scope("attention", 0, 4, 20), *flow(1, 20, 2, 5),
        kernel("matmul_kernel", 5, 10, 20),
        kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 20, 10, 20, stream=3),
        kernel("_Z40NCCLDEVKERNEL_AllGather", 22, 3, 20),
        kernel("Memcpy DtoH (Device -> Pinned)", 40, 2, 20),
        kernel("[CUDA memset 8 bytes]", 50, 1, 20),
        kernel("copy", 60, 1, 20, cat="gpu_memcpy"),
        kernel("fill", 61, 1, 20, cat="gpu_memset"),
        scope("decode_step", 0, 70, 20),  # a scope, not GPU work
        kernel("late_rank_kernel", 3, 1, 40),
    ]
    with tiny_engine(tmp_path_factory.mktemp("kernels"), events) as engine:
        yield engine


def test_kernels_classes_and_launch_scopes(engine):
    assert rows(engine, "kernels", """
        SELECT k.rank, k.ts, k.dur, k.name, k.category, k.kernel_class, t.tid, l.name AS launch
        FROM tt_kernels AS k JOIN thread AS t USING (utid) LEFT JOIN slice AS l ON l.id = k.launch_id""") == [
        ("TP0", 5 * US, 10 * US, "matmul_kernel", "kernel", "compute", 22, "attention"),
        ("TP0", 20 * US, 10 * US, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "kernel", "nccl", 23, None),
        ("TP0", 22 * US, 3 * US, "_Z40NCCLDEVKERNEL_AllGather", "kernel", "nccl", 22, None),
        ("TP0", 40 * US, 2 * US, "Memcpy DtoH (Device -> Pinned)", "kernel", "memory", 22, None),
        ("TP0", 50 * US, 1 * US, "[CUDA memset 8 bytes]", "kernel", "memory", 22, None),
        ("TP0", 60 * US, 1 * US, "copy", "gpu_memcpy", "memory", 22, None),
        ("TP0", 61 * US, 1 * US, "fill", "gpu_memset", "memory", 22, None),
        ("TP1", 3 * US, 1 * US, "late_rank_kernel", "kernel", "compute", 42, None)]
