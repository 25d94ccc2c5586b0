"""The report's SQL facts on the real sample: `gap_causes` is `gpu_gaps` with the `host_stalls`
frame_rank 1 row and the stall flag; `rank_summary` ranks the stalls' own causes (`gap_causes`),
takes the first `host_stall_profile` row over the shorter host gaps and the `step_breakdown` step
count; the report's tables only pick rows from them."""

from __future__ import annotations

import pandas as pd
import pytest

from tokentrace.catalog import RANK_IDENTITY
from tokentrace.report.pipeline import compute_report_tables, run_report_queries
from tokentrace.report.tables import top_stalls


def _rows(frame: pd.DataFrame, columns: list[str]) -> list[tuple]:
    """Rows as plain tuples, NULLs as None (so Int64 NA and NaN compare alike)."""
    picked = frame[columns].astype(object)
    return [tuple(row) for row in picked.where(picked.notna(), None).itertuples(index=False)]


@pytest.fixture(scope="module")
def report_rows(analysis_t39):
    results, used, skipped = run_report_queries(analysis_t39)
    assert skipped == []
    return results, used


def test_gap_causes_are_gpu_gaps_with_their_cause(analysis_t39, report_rows):
    results, _ = report_rows
    gaps, causes, stalls = results["gpu_gaps"], results["gap_causes"], results["host_stalls"]
    assert _rows(causes, list(gaps.columns)) == _rows(gaps, list(gaps.columns))
    # gaps the host did not cause: their frame_rank 1 host frame, no kind
    first = stalls[stalls["frame_rank"] == 1].rename(columns={
        "function": "cause_function", "frame": "cause_frame", "self_ns": "cause_ns"})
    joined = causes.merge(first[["rank", "gap_index", "cause_function", "cause_frame", "cause_ns"]],
                          on=["rank", "gap_index"], how="left", suffixes=("", "_host_stalls"))
    other = joined[joined["by_host"] == 0]
    assert other["cause_kind"].isna().all()  # (every gap of this sample is host-caused)
    for column in ("cause_function", "cause_frame", "cause_ns"):
        assert _rows(other, [column]) == _rows(other, [f"{column}_host_stalls"]), column
    # host-caused gaps: a kind, and a cause that explains part of the gap
    host = causes[causes["by_host"] == 1]
    assert set(host["cause_kind"]) <= {"sync", "gc", "blocking", "gil", "busy", "unknown"}
    known = host[host["cause_kind"] != "unknown"]
    assert ((known["cause_ns"] > 0) & (known["cause_ns"] <= known["dur"])).all()


def test_stalls_are_the_injected_sleeps(report_rows):
    causes = report_rows[0]["gap_causes"]
    stalls = causes[causes["is_stall"] == 1]
    assert stalls.groupby("rank").size().to_dict() == {"TP0": 4, "TP1": 4}
    # serve_sim's host_stall sleeps: blocking in time.sleep
    assert set(stalls["cause_function"]) == {"host_stall"} and set(stalls["cause_kind"]) == {"blocking"}
    assert set(stalls["cause_call"]) == {"time.sleep"} and set(stalls["label"]) == {"blocking: host_stall"}
    assert (stalls["phase"] == "steady").all() and (stalls["by_host"] == 1).all()
    assert (stalls["dur"] >= 2_000_000).all()
    startup = causes[causes["phase"] == "startup"]
    assert startup["label"].str.startswith("start-up: ").all()
    assert (startup["is_stall"] == 0).all()


def test_rank_summary_is_the_stalls_own_causes_and_the_steps(report_rows):
    results, _ = report_rows
    summary = results["rank_summary"].set_index("rank")
    short = results["short_host_gaps"].query("frame_rank == 1").set_index("rank")
    causes = results["gap_causes"]
    stalls = causes[causes["is_stall"] == 1]
    # the top cause: the (kind, frame) that explains the most GPU idle in its stalls
    ranked = (stalls.groupby(["rank", "cause_kind", "cause_frame"])
              .agg(explained=("cause_ns", "sum"), length=("dur", "sum"), size=("dur", "size"))
              .reset_index().sort_values(["rank", "explained"], ascending=[True, False])
              .drop_duplicates("rank").set_index("rank"))
    assert summary["top_frame"].to_dict() == ranked["cause_frame"].to_dict()
    assert summary["top_kind"].to_dict() == ranked["cause_kind"].to_dict()
    assert summary["top_idle_ns"].to_dict() == ranked["explained"].to_dict()
    assert summary["top_stall_ns"].to_dict() == ranked["length"].to_dict()
    assert summary["top_gaps"].to_dict() == ranked["size"].to_dict()
    # the headline is the first of the stalls by cause
    assert (summary["next_functions"].str.split(" [(]").str[0] == summary["top_function"]).all()
    assert summary["short_top_function"].to_dict() == short["function"].to_dict()
    assert summary["short_idle_ns"].to_dict() == short["gap_time_ns"].to_dict()
    assert summary["stalls"].to_dict() == causes.groupby("rank")["is_stall"].sum().to_dict()
    assert summary["steps"].to_dict() == results["step_breakdown"].groupby("rank").size().to_dict()
    assert (summary["top_idle_per_step_ns"] == summary["top_idle_ns"] // summary["steps"]).all()
    assert list(summary.index) == list(results["gpu_windows"]["rank"])


def test_parameters_reach_the_stall_queries(analysis_t39):
    # The injected stalls last ~9 ms: a 20 ms threshold leaves none.
    summary = analysis_t39.rank_summary(stall_min_us=20_000)
    assert (summary["stalls"] == 0).all() and summary["top_function"].isna().all()
    assert (summary["top_idle_ns"] == 0).all()
    assert (analysis_t39.gap_causes(stall_min_us="20ms")["is_stall"] == 0).all()
    no_steps = analysis_t39.rank_summary(step_name="no_such_step")
    assert (no_steps["steps"] == 0).all() and no_steps["top_idle_per_step_ns"].isna().all()
    one = analysis_t39.rank_summary(rank="TP1")
    assert one["rank"].tolist() == ["TP1"]


def test_user_parameters_and_query_defaults_are_recorded(analysis_t39):
    results, used, _ = run_report_queries(analysis_t39, {"stall_min_us": 5000})
    assert used["gap_causes"][1]["stall_min_us"] == 5000
    assert used["stall_causes"][1]["min_gap_us"] == 5000
    assert used["short_host_gaps"][1]["max_gap_us"] == 5000
    assert used["gpu_gaps"][1]["min_gap_us"] == 100  # the query's default, not given
    assert "stall_min_us" not in used["gpu_gaps"][1]  # only declared parameters are passed


def test_report_tables_only_pick_rows(report_rows):
    results, _ = report_rows
    tables = compute_report_tables(results)
    summary = tables["summary"]
    windows, stalls = results["gpu_windows"], results["rank_summary"]
    assert _rows(summary, list(windows.columns)) == _rows(windows, list(windows.columns))
    picked = [c for c in stalls.columns if c not in RANK_IDENTITY[1:]]
    assert _rows(summary, picked) == _rows(stalls, picked)
    top = tables["top_stalls"]
    assert top.groupby("rank").size().to_dict() == {"TP0": 10, "TP1": 10}
    for _, rank_rows in top.groupby("rank"):
        assert rank_rows["dur"].is_monotonic_decreasing
    assert top_stalls(results["gap_causes"].iloc[0:0]).empty
