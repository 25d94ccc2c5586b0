"""gpu_busy: each rank's GPU busy time split into compute, memory ops and NCCL, overlap between
kinds counted once (compute first, then memory, then NCCL), on a hand-made trace and on every
real trace set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.merged_fixtures import available_sets, serving_sets
from tokentrace.catalog import open_trace, run_query

EDGE = Path(__file__).parent / "traces" / "edge_cases.json"
US = 1000
SPLIT = ["compute_ns", "memory_ns", "nccl_ns"]
SHARES = ["compute_share", "memory_share", "nccl_share", "idle_share"]


@pytest.fixture(scope="module")
def mixed_kinds(tmp_path_factory):
    """edge_cases.json plus, on TP0's stream 8, an all-reduce [300, 320) beside the compute
    kernel k6 [300, 310), a device copy [315, 318) under the all-reduce and a host copy [135,
    145) half under k4 [130, 140) (µs)."""
    trace = json.loads(EDGE.read_text(encoding="utf-8"))
    extra = [("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 300, 20), ("Memcpy DtoD (Device -> Device)", 315, 3),
             ("Memcpy DtoH (Device -> Pinned)", 135, 10)]
    trace["traceEvents"] += [{"ph": "X", "name": name, "cat": "kernel", "pid": 20, "tid": 23, "ts": ts, "dur": dur}
                             for name, ts, dur in extra]
    path = tmp_path_factory.mktemp("gpu_busy") / "mixed_kinds.json"
    path.write_text(json.dumps(trace), encoding="utf-8")
    with open_trace(path, warn=False) as engine:
        yield engine


def test_overlap_between_kinds_is_counted_once(mixed_kinds):
    row = run_query(mixed_kinds, "gpu_busy").set_index("rank").loc["TP0"]
    # compute: [0,30) [130,140) [145,150) [300,310) [500,510); busy: [0,30) [130,150) [300,320) [500,510)
    assert row.compute_ns == 65 * US and row.busy_ns == 80 * US and row.active_ns == 510 * US
    assert row.memory_total_ns == 13 * US and row.memory_ns == 8 * US  # [135,140) under k4
    assert row.nccl_total_ns == 20 * US and row.nccl_ns == 7 * US  # [300,310) under k6, [315,318) a copy
    assert row.nccl_overlap_ns == 13 * US and row.memory_overlap_ns == 5 * US
    assert (row.compute_kernels, row.memory_ops, row.nccl_kernels) == (7, 2, 1)
    assert sum(row[c] for c in SHARES) == pytest.approx(1.0)
    kinds = run_query(mixed_kinds, "kernel_summary").groupby("kernel_class")["count"].sum().to_dict()
    assert kinds == {"compute": 7, "memory": 2, "nccl": 1}
    assert run_query(mixed_kinds, "gpu_busy", {"rank": "TP1"}).empty  # no kernels


@pytest.mark.parametrize("name", available_sets() + serving_sets())
def test_busy_split_adds_up_to_the_window(merged_sets, name):
    _, _, engine = merged_sets(name)
    busy = run_query(engine, "gpu_busy").set_index("rank")
    windows = run_query(engine, "gpu_windows").set_index("rank")
    assert list(busy.index) == list(windows.index)
    assert (busy["busy_ns"] == windows["busy_ns"]).all() and (busy["active_ns"] == windows["active_ns"]).all()
    assert (busy[SPLIT].sum(axis=1) == busy["busy_ns"]).all()
    assert (busy[SPLIT].sum(axis=1) + busy["idle_ns"] == busy["active_ns"]).all()
    assert ((busy[SHARES].sum(axis=1) - 1).abs() < 1e-9).all()
    assert (busy[SPLIT + ["nccl_overlap_ns", "memory_overlap_ns"]] >= 0).all().all()
    assert (busy["nccl_total_ns"] >= busy["nccl_ns"]).all()
    counted = busy[["compute_kernels", "memory_ops", "nccl_kernels"]].sum(axis=1)
    assert (counted == windows["kernels"]).all()
    kinds = run_query(engine, "kernel_summary").pivot_table(index="rank", columns="kernel_class", values="count",
                                                            aggfunc="sum", fill_value=0)
    assert (kinds.get("nccl", 0) == busy["nccl_kernels"]).all()
    assert (kinds.get("compute", 0) == busy["compute_kernels"]).all()


@pytest.mark.parametrize("name", [n for n in available_sets() if n.endswith("tp2")])
def test_tensor_parallel_sets_run_their_all_reduces(merged_sets, name):
    _, _, engine = merged_sets(name)
    busy = run_query(engine, "gpu_busy").set_index("rank")
    steps = 40 if name.startswith("sample") else 120
    assert (busy["nccl_kernels"] == steps).all()  # one all-reduce per decode step
    assert (busy["nccl_ns"] > 0).all() and (busy["memory_ns"] == 0).all()
    if name == "t36_tp2":
        # TP1 reaches every all-reduce first and spins in it until TP0 arrives (~205 ms)
        assert busy.loc["TP1", "nccl_ns"] > 150e6 > 10 * busy.loc["TP0", "nccl_ns"]


@pytest.mark.parametrize("name", [n for n in serving_sets() if n == "engine_mixed"])
def test_single_gpu_engine_is_all_compute(merged_sets, name):
    _, _, engine = merged_sets(name)
    busy = run_query(engine, "gpu_busy")
    assert (busy["nccl_kernels"] == 0).all() and (busy["compute_ns"] == busy["busy_ns"]).all()


def test_busy_and_idle_ids_number_the_rows_in_rank_then_time_order(merged_sets):
    """Every rank of a combined trace (two here): `tt_gpu_busy` and `tt_gpu_idle` ids are 1..n in
    rank, then time order (computed from each rank's counts, not by a pass over the rows)."""
    _, _, engine = merged_sets("sample_t39_tp2")
    engine.query("INCLUDE PERFETTO MODULE tokentrace.gaps")
    for table in ("tt_gpu_busy", "tt_gpu_idle"):
        rows = engine.query(f"SELECT id, rank, ts FROM {table}")
        assert rows["rank"].nunique() == 2, table
        ordered = rows.sort_values(["rank", "ts"], kind="stable").reset_index(drop=True)
        assert list(ordered["id"]) == list(range(1, len(rows) + 1)), table
