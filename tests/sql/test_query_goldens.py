"""Diff tests: the bundled queries not pinned by `test_stall_goldens.py`, on the real samples
(merged, all ranks in one file), against goldens in `golden/`. Each golden holds aggregated or
stable columns only: no slice ids, times as durations or relative to the trace start, frames as
function names (no file paths). Before a golden is compared its figures are checked against the
injected stalls of the samples' `.truth.json.gz` (tests/data/README.md) where they can be, so a
golden rewritten with TT_UPDATE_GOLDENS=1 still has to agree with the ground truth."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from support.goldens import GOLDEN, UNSET_IDENTITY, check_golden
from support.paths import REPO
from support.trace_files import load_json
from tokentrace.catalog import run_query

SAMPLES = ["sample_t39_tp2", "sample_t36_tp2"]
#: triton 3.9 records a Proton anchor (merge aligns on it), triton 3.6 does not (estimated).
ALIGN = {"sample_t39_tp2": ("anchors", "3.9"), "sample_t36_tp2": ("estimated", "3.8")}
QUERIES = REPO / "queries"  # the bundled queries
STEPS = 40  # both samples: 40 decode steps, one all-reduce each
_FILE = re.compile(r" \([^()]*:\d+\)")  # ` (/path/file.py:12)` of a VizTracer frame name


def _no_paths(text):
    return text if not isinstance(text, str) else _FILE.sub("", text)


def _truth(folder) -> pd.DataFrame:
    """The injected stalls, one row each: rank tag, start_ns, end_ns (Unix-epoch ns)."""
    rows = []
    for path in sorted(folder.glob("*.truth.json.gz")):
        truth = load_json(path)
        rows += [{"rank": f"TP{truth['rank']}", "start_ns": s["start_ns"], "end_ns": s["end_ns"]}
                 for s in truth["stalls"]]
    return pd.DataFrame(rows)


def _start(engine) -> int:
    return int(engine.query("SELECT start_ts FROM trace_bounds").start_ts[0])


@pytest.mark.parametrize("name", SAMPLES)
def test_gap_causes(merged_sets, name):
    folder, _, engine = merged_sets(name)
    causes = run_query(engine, "gap_causes")
    truth = _truth(folder)
    stalls = causes[causes.is_stall == 1]
    # every injected 8 ms sleep is one stall of its rank, caused by host_stall sleeping
    assert stalls.groupby("rank").size().to_dict() == truth.groupby("rank").size().to_dict()
    for stall in truth.itertuples():
        rows = stalls[stalls["rank"] == stall.rank]
        overlap = ((rows.unix_ts + rows.dur).clip(upper=stall.end_ns)
                   - rows.unix_ts.clip(lower=stall.start_ns)).clip(lower=0)
        hit = rows.loc[overlap.idxmax()]
        assert overlap.max() >= 0.8 * (stall.end_ns - stall.start_ns)
        assert (hit.cause_kind, hit.cause_function, hit.cause_call) == ("blocking", "host_stall", "time.sleep")
        assert abs(hit.cause_ns - (stall.end_ns - stall.start_ns)) <= 0.05 * (stall.end_ns - stall.start_ns)
    assert (causes.cause_ns <= causes.dur).all()
    summary = (causes.groupby(["rank", "phase", "gap_class", "cause_kind", "is_stall"])
               .agg(gaps=("dur", "size"), dur_ns=("dur", "sum"), cause_ns=("cause_ns", "sum"))
               .reset_index())
    check_golden(f"gap_causes_{name}", summary)
    check_golden(f"gap_causes_stalls_{name}", stalls.assign(ts=stalls.ts - _start(engine))[
        ["rank", "gap_index", "ts", "dur", "start_ns", "dur_rank", "launch_source", "cause_kind",
         "cause_thread", "cause_function", "cause_call", "cause_ns", "label"]])


@pytest.mark.parametrize("name", SAMPLES)
def test_gpu_windows_and_busy(merged_sets, name):
    folder, _, engine = merged_sets(name)
    windows = run_query(engine, "gpu_windows")
    busy = run_query(engine, "gpu_busy")
    truth = _truth(folder)
    slept = (truth.end_ns - truth.start_ns).groupby(truth["rank"]).sum()
    # the injected sleeps are steady host-caused idle, nearly all of it (>= 80 %)
    assert (windows.set_index("rank").idle_host_steady_ns >= 0.8 * slept).all()
    assert (windows.busy_ns + windows.idle_ns == windows.active_ns).all()
    assert windows.busy_ns.tolist() == busy.busy_ns.tolist()
    assert (busy.compute_ns + busy.memory_ns + busy.nccl_ns == busy.busy_ns).all()
    assert (busy.nccl_kernels == STEPS).all() and (busy.memory_ops == 0).all()
    start = _start(engine)
    check_golden(f"gpu_windows_{name}", windows.assign(
        first_ts=windows.first_ts - start, last_end_ts=windows.last_end_ts - start).drop(
        columns=UNSET_IDENTITY))
    check_golden(f"gpu_busy_{name}", busy.drop(columns=UNSET_IDENTITY))


@pytest.mark.parametrize("name", SAMPLES)
def test_idle_budget(merged_sets, name):
    folder, _, engine = merged_sets(name)
    budget = run_query(engine, "idle_budget")
    truth = _truth(folder)
    blocking = budget[budget.category == "host_blocking"].set_index("rank")
    assert blocking.gaps.to_dict() == truth.groupby("rank").size().to_dict()  # the sleeps
    assert (budget.groupby("rank").share.sum().sub(1).abs() < 1e-9).all()
    assert (budget.groupby("rank").idle_ns.sum() == budget.groupby("rank").active_idle_ns.first()).all()
    assert (budget.steps == STEPS).all()
    check_golden(f"idle_budget_{name}", budget.drop(columns=UNSET_IDENTITY))


@pytest.mark.parametrize("name", SAMPLES)
def test_kernel_summary(merged_sets, name):
    _, _, engine = merged_sets(name)
    kernels = run_query(engine, "kernel_summary")
    health = run_query(engine, "trace_health").set_index("rank")
    counted = kernels.groupby("rank")["count"].sum()
    assert (counted == health.proton_kernels).all()
    assert (kernels[kernels.kernel_class == "nccl"].groupby("rank")["count"].sum() == STEPS).all()
    assert (kernels.groupby("rank").gpu_time_share.sum().sub(1).abs() < 1e-9).all()
    classes = (kernels.groupby(["rank", "kernel_class"])
               .agg(kernels=("kernel", "size"), count=("count", "sum"), total_dur_ns=("total_dur_ns", "sum"))
               .reset_index())
    check_golden(f"kernel_summary_classes_{name}", classes)
    top = kernels.groupby("rank").head(6)  # the query orders each rank's kernels by total time
    check_golden(f"kernel_summary_{name}", top[["rank", "kernel", "kernel_class", "count", "total_dur_ns",
                                                "min_dur_ns", "p50_dur_ns", "max_dur_ns", "gpu_time_share"]])


@pytest.mark.parametrize("name", SAMPLES)
def test_rank_summary(merged_sets, name):
    folder, _, engine = merged_sets(name)
    summary = run_query(engine, "rank_summary").set_index("rank")
    truth = _truth(folder)
    slept = (truth.end_ns - truth.start_ns).groupby(truth["rank"]).sum()
    assert summary.stalls.to_dict() == truth.groupby("rank").size().to_dict()
    assert (summary.top_function == "host_stall").all() and (summary.top_kind == "blocking").all()
    assert (summary.top_call == "time.sleep").all() and (summary.steps == STEPS).all()
    assert (summary.top_idle_ns >= 0.8 * slept).all() and (summary.top_idle_ns <= summary.stall_idle_ns).all()
    text = ["next_functions", "step_name"]  # top_frame: top_function and its file path
    check_golden(f"rank_summary_{name}", summary.reset_index().drop(columns=[*UNSET_IDENTITY, "top_frame"])
                 .assign(**{column: summary[column].map(_no_paths).values for column in text}))


@pytest.mark.parametrize("name", SAMPLES)
def test_trace_health(merged_sets, name):
    _, _, engine = merged_sets(name)
    health = run_query(engine, "trace_health")
    method, dialect = ALIGN[name]
    assert (health.align_method == method).all() and (health.proton_dialect == dialect).all()
    assert (health.stats_errors == 0).all() and (health.stats_data_loss == 0).all()
    assert (health.kernels == health.proton_kernels).all() and (health.viz_overflow == 0).all()
    assert (health.overlapping_ranks == 1).all()  # the two ranks ran together
    if dialect == "3.8":
        assert (health.kernels_with_flow == 0).all()  # triton 3.6 writes no launch flow
    start = _start(engine)
    check_golden(f"trace_health_{name}", health.assign(
        gpu_first_ts=health.gpu_first_ts - start, gpu_last_ts=health.gpu_last_ts - start).drop(
        columns=UNSET_IDENTITY))


@pytest.mark.parametrize("name", SAMPLES)
def test_collectives(merged_sets, name):
    _, _, engine = merged_sets(name)
    skew = run_query(engine, "collective_skew")
    wait = run_query(engine, "collective_wait")
    busy = run_query(engine, "gpu_busy").set_index("rank")
    # two ranks: in each all-reduce the first to arrive waits for the other, so the waits add up
    # to the summed arrival skew, one collective each, and stay inside the NCCL kernels' time
    assert wait.collectives.sum() == len(skew) == STEPS
    assert wait.wait_ns.sum() == skew.arrival_skew_ns.sum()
    assert (wait.groupby("rank").wait_ns.sum() <= busy.nccl_total_ns.reindex(wait["rank"].unique())).all()
    assert (wait["rank"] != wait.late_rank).all()
    check_golden(f"collective_wait_{name}", wait.drop(columns=[*UNSET_IDENTITY, "cause_frame"]))
    check_golden(f"collective_skew_{name}", skew.assign(ts=skew.ts - _start(engine)))


def test_every_bundled_query_has_a_golden():
    """A query added to queries/ needs its golden here or in test_stall_goldens.py."""
    queries = sorted(path.stem for path in QUERIES.glob("*.sql"))
    assert len(queries) >= 15
    for query in queries:
        prefix = {"rank_skew": "skew"}.get(query, query)  # test_stall_goldens' skew summary
        assert any(GOLDEN.glob(f"{prefix}_sample_*.csv")), f"no golden for {query}"
