"""The bundled queries on a rank replicated in time (``benchmarks/replicate.py``): what scales
exactly k-fold does, and every copy's gaps, classes, causes and steps equal the original's.

``sample_t39_tp2`` TP0 written 1x and 2x by the replication tool (each copy shifted by the rank's
span, ids renumbered), merged per rank, the queries below run on both. The second copy starts
after one extra gap (the first copy's end to the second's first kernel: the original's start-up
gap, now a steady one), so gap rows are 2n + 1. Timing is ``benchmarks/bench_scaling.py``'s job;
this guards the replication and the SQL's translation invariance (an optimisation that, say,
matched gaps to the wrong collective or step would break it).
"""

from __future__ import annotations

import sys
import warnings

import pytest

from support.paths import DATA, REPO
from tokentrace.catalog import open_trace, run_query
from tokentrace.errors import TokentraceWarning
from tokentrace.merge import merge
from tokentrace.options import MergeOptions

sys.path.insert(0, str(REPO / "benchmarks"))
from replicate import replicate  # noqa: E402

QUERIES = ["trace_health", "kernel_summary", "launch_latency", "step_breakdown", "rank_skew",
           "collective_skew", "gpu_gaps", "gap_causes", "rank_summary"]


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    """{k: {query name: rows}} for the 1x and 2x replicated sample_t39_tp2 TP0."""
    root = tmp_path_factory.mktemp("scaling")
    results = {}
    for times in (1, 2):
        profile = root / f"x{times}"
        replicate(DATA / "sample_t39_tp2", profile, tags=["TP0"], times=times)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TokentraceWarning)
            merged = merge([profile], root / f"x{times}-merged", MergeOptions()).outputs[0]
        with open_trace(merged, warn=False) as engine:
            results[times] = {name: run_query(engine, name) for name in QUERIES}
    return results


@pytest.mark.slow
def test_counts_double(scaled):
    one, two = scaled[1], scaled[2]
    for column in ("kernels", "kernels_with_flow", "kernels_with_launch", "proton_kernels"):
        assert two["trace_health"][column].iloc[0] == 2 * one["trace_health"][column].iloc[0], column
    assert two["trace_health"]["stats_errors"].iloc[0] == 0
    k1 = one["kernel_summary"].set_index("kernel")
    k2 = two["kernel_summary"].set_index("kernel").loc[k1.index]
    assert (k2["count"] == 2 * k1["count"]).all()
    assert (k2["total_dur_ns"] == 2 * k1["total_dur_ns"]).all()
    l1 = one["launch_latency"].set_index(["kernel", "launch_source"])
    l2 = two["launch_latency"].set_index(["kernel", "launch_source"]).loc[l1.index]
    assert (l2["count"] == 2 * l1["count"]).all() and (l2["p50_ns"] == l1["p50_ns"]).all()
    for name in ("step_breakdown", "rank_skew", "collective_skew"):
        assert len(two[name]) == 2 * len(one[name]) > 0, name
    assert len(two["gpu_gaps"]) == 2 * len(one["gpu_gaps"]) + 1
    assert len(two["gap_causes"]) == 2 * len(one["gap_causes"]) + 1


@pytest.mark.slow
def test_second_copy_repeats_the_first(scaled):
    n = len(scaled[1]["gpu_gaps"])
    for name, columns in (
        ("gpu_gaps", ["dur", "prev_kernel", "next_kernel", "launch_source", "gap_class", "host_caused_ns"]),
        ("gap_causes", ["dur", "gap_class", "cause_kind", "cause_function", "cause_call", "cause_ns"]),
    ):
        first = scaled[1][name][columns].reset_index(drop=True)
        second = scaled[2][name][columns].iloc[n + 1:].reset_index(drop=True)
        assert first.equals(second), name
    steps1, steps2 = scaled[1]["step_breakdown"], scaled[2]["step_breakdown"]
    columns = ["step_dur", "gpu_busy_ns", "idle_host_late_ns", "idle_short_ns", "step_name"]
    # every step but the last (whose window now runs to the next copy's first step)
    first = steps1[columns].iloc[:-1].reset_index(drop=True)
    second = steps2[columns].iloc[len(steps1):-1].reset_index(drop=True)
    assert first.equals(second)
    # twice the stalls, plus the copies' junction (a steady host gap now, over the stall bound)
    # and the first copy's first gap: its one-off torch.randint (cuRAND's set-up, `startup` in
    # one copy) has an equally long twin in the second copy, so it no longer shows set-up
    # (tokentrace.setup) and is a steady stall
    s1, s2 = scaled[1]["rank_summary"].iloc[0], scaled[2]["rank_summary"].iloc[0]
    assert s1.top_function == "host_stall"
    assert s2.stalls == 2 * s1.stalls + 2 and s2.steps == 2 * s1.steps
    gaps1, gaps2 = scaled[1]["gpu_gaps"], scaled[2]["gpu_gaps"]
    assert (gaps1.phase == "startup").sum() == 1 and (gaps2.phase == "startup").sum() == 0
