"""``engine_kineto`` -> ``engine_mixed_kineto`` (../shared/traces: the same serving loop, sleep
and busy stalls vs gil, sync and gc stalls): the budget diff is the two runs' own budgets, the
verdict says which kinds fell and rose. Also ranks, profilers and steps that do not match."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

import tokentrace
from tokentrace.diff import compare, load_run
from tokentrace.options import AnalyzeOptions


@pytest.fixture(scope="module")
def kineto_runs(shared_traces, tmp_path_factory):
    cache = tmp_path_factory.mktemp("kineto_diff")
    options = AnalyzeOptions()
    return tuple(load_run(shared_traces / name, options, cache / name)
                 for name in ("engine_kineto", "engine_mixed_kineto"))


@pytest.fixture(scope="module")
def kineto_diff(kineto_runs):
    return compare(*kineto_runs)


def test_budget_diff_is_both_runs_budgets(kineto_runs, kineto_diff):
    before, after = kineto_runs
    budget = kineto_diff.idle_budget_diff
    for side, run in (("before", before), ("after", after)):
        own = run.tables["idle_budget"].set_index(["rank", "category"])["idle_ns"]
        mine = budget.set_index(["rank", "category"])[f"{side}_ns"]
        assert mine[mine != 0].sort_index().equals(own[own != 0].sort_index().astype("int64"))
        assert set(mine.index) == set(before.tables["idle_budget"].set_index(["rank", "category"]).index) | set(
            after.tables["idle_budget"].set_index(["rank", "category"]).index)
        shares = run.tables["idle_budget"].set_index(["rank", "category"])["share"]
        assert budget.set_index(["rank", "category"]).loc[shares.index, f"{side}_share"].tolist() == shares.tolist()


def test_blocking_and_busy_fall_gil_and_gc_rise(kineto_diff):
    budget = kineto_diff.idle_budget_diff.set_index("category")
    assert budget.loc["host_blocking", "delta_ns"] < 0 and budget.loc["host_blocking", "after_ns"] == 0
    assert budget.loc["host_gil", "before_ns"] == 0 and budget.loc["host_gil", "delta_ns"] > 0
    assert budget.loc["host_gc", "before_ns"] == 0 and budget.loc["host_gc", "delta_ns"] > 0
    assert budget.loc["host_busy", "delta_share"] < 0  # busy's part of the idle fell
    causes = kineto_diff.cause_diff
    stall_idle = causes.groupby("kind")[["before_stall_idle_ns", "after_stall_idle_ns"]].sum()
    assert stall_idle.loc["busy", "after_stall_idle_ns"] < stall_idle.loc["busy", "before_stall_idle_ns"]
    gone = set(causes.loc[causes["status"] == "disappeared", "function"])
    new = set(causes.loc[causes["status"] == "appeared", "function"])
    assert {"flush_request_log", "detokenize_responses"} <= gone
    assert {"collect_garbage", "sort_pending_responses"} <= new
    text = "\n".join(kineto_diff.verdict)
    assert "fell host_blocking" in text and "host_gc +" in text and "host_gil +" in text
    kinds = next(line for line in kineto_diff.verdict if "stalls by kind" in line)
    assert kinds.endswith("; fell: blocking, busy; rose: gc, gil, sync")
    assert "TP0: GPU idle 28.8% -> 61.4% of active time (+32.5 points)" in text
    assert kineto_diff.regressions(0) and not kineto_diff.regressions(50)


def test_ranks_of_one_run_only_are_reported_not_compared(kineto_runs):
    before, after = kineto_runs
    renamed = dataclasses.replace(after, tables={name: pd.concat([rows.assign(rank="TP1"), rows.assign(rank="TP2")])
                                                 for name, rows in after.tables.items()})
    result = compare(before, renamed)
    assert dict(zip(result.rank_diff["rank"], result.rank_diff["status"])) == {"TP0": "before only",
                                                                               "TP1": "after only",
                                                                               "TP2": "after only"}
    assert result.idle_budget_diff.empty and result.cause_diff.empty and result.kernel_diff.empty
    assert any("TP1: in the after run only" in note for note in result.notes)
    assert "TP0: before only (not compared)" in result.verdict
    assert result.regressions(0) == []


def test_other_profiler_and_steps_are_reported(kineto_runs):
    before, after = kineto_runs
    tables = dict(after.tables)
    tables["trace_health"] = tables["trace_health"].assign(gpu_format="proton")
    tables["rank_summary"] = tables["rank_summary"].assign(step_name="decode_step", step_source="scope")
    tables["gap_causes"] = tables["gap_causes"]
    result = compare(before, dataclasses.replace(after, tables=tables,
                                                 params=after.params | {"gap_causes": {"min_gap_us": 50}}))
    assert not result.rank_diff["comparable"].iloc[0]
    notes = "\n".join(result.notes)
    assert "recorded by kineto before and proton after" in notes
    assert "steps differ: schedule (auto) before, decode_step (scope) after" in notes
    assert "gap_causes computed with other parameters: min_gap_us 100" in notes
    # the runs' setup leads the verdict; the rank's idle line says why it is not like for like
    assert result.verdict[0] == "not like for like: profiler kineto vs proton, step schedule vs decode_step"
    assert result.verdict[1].startswith("TP0: step time p50 ")
    assert result.verdict[1].endswith("steps of schedule before, decode_step after (not the same step)")
    idle = next(line for line in result.verdict if line.startswith("TP0: GPU idle"))
    assert idle.endswith("[not like for like: GPU profiler kineto -> proton; steps schedule (auto) -> "
                         "decode_step (scope)]")
    # not the same step: step time is no regression, and nothing is called recovered
    assert not any("step time p50 grew" in line for line in result.regressions(0))
    assert not any(": recovered " in line for line in result.verdict), result.verdict
    assert any("not counted as recovered: profiler kineto vs proton" in line for line in result.verdict)


def test_python_api_returns_dataframes(serve_pair, tmp_path):
    before, after = serve_pair
    result = tokentrace.diff(before, after, cache_dirs=(tmp_path / "b", tmp_path / "a"))
    for name, table in result.tables().items():
        assert isinstance(table, pd.DataFrame) and len(table), name
    assert result.before == str(before) and result.verdict[0].startswith("TP0: step time p50 ")
    assert result.verdict[1].startswith("TP0: GPU idle 95.9%")
