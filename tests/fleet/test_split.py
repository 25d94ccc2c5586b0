"""Two engines per rank (more jobs than ranks, `tokentrace.fleet.split`): the queries split
along the module chain, and every table equals the one a single engine per rank gives."""

from __future__ import annotations

import warnings

import pandas as pd
import pytest

from support.paths import DATA
from tokentrace.catalog import find_query, list_queries
from tokentrace.engine.base import Engine
from tokentrace.fleet import QueryRequest, RankSet, rank_traces
from tokentrace.fleet.batch import BatchPlan
from tokentrace.fleet.execute import RankWork, rank_rows
from tokentrace.fleet.split import shared_modules, split_again, split_requests
from tokentrace.merge.pipeline import merge
from tokentrace.options import EngineOptions, MergeOptions
from tokentrace.runtime.processes import ForkedCall

REQUESTS = [QueryRequest(spec.name, spec.name) for spec in list_queries()]
# the queries that need tokentrace.causes or tokentrace.steps, the modules no module INCLUDEs
LATE = {"collective_wait", "gap_causes", "host_stalls", "idle_budget", "rank_skew", "rank_summary",
        "step_breakdown"}


@pytest.fixture(scope="module")
def sample_traces(tmp_path_factory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = merge([DATA / "sample_t39_tp2"], tmp_path_factory.mktemp("split"), MergeOptions())
    return rank_traces(result.ranks)


def test_queries_split_along_the_module_chain(tmp_path):
    first, second = split_requests(REQUESTS)
    assert {r.table for r in first} == LATE
    assert {r.table for r in second} == {r.table for r in REQUESTS} - LATE
    # each group keeps the given order; one query alone, or only late ones, is not split
    assert [r.table for r in first] == [r.table for r in REQUESTS if r.table in LATE]
    assert split_requests(REQUESTS[:1]) == [REQUESTS[:1]]
    assert len(split_requests(first)) == 1
    # a query file of the user's may read what another created: such a batch stays whole
    mine = tmp_path / "mine.sql"
    mine.write_text(find_query("gpu_gaps").path.read_text())
    user = QueryRequest("mine", str(mine))
    assert split_requests([user, *REQUESTS]) == [[user, *REQUESTS]]


def test_late_queries_split_again_after_causes_and_steps():
    """The late group parts once more in the forked copy: into two groups, in the given order,
    whose shared modules (built before they part) hold ``causes`` and ``steps``."""
    first, _ = split_requests(REQUESTS)
    parts = split_again(first)
    assert len(parts) == 2 and sorted(r.table for part in parts for r in part) == sorted(LATE)
    assert all([r.table for r in part] == [r.table for r in first if r in part] for part in parts)
    assert {"tokentrace.causes", "tokentrace.steps"} <= set(shared_modules(parts))
    assert split_again(first[:1]) == [first[:1]]


@pytest.mark.slow
def test_two_engines_only_with_two_jobs_per_rank(sample_traces):
    def engines_per_rank(jobs, traces, requests):  # as a batch run plans it (tokentrace.fleet.plan)
        return len(RankSet(traces, jobs=jobs, plan=BatchPlan(tuple(requests))).map_groups(requests))

    assert engines_per_rank(4, sample_traces, REQUESTS) == 2
    assert engines_per_rank(3, sample_traces, REQUESTS) == 1
    assert engines_per_rank(2, sample_traces[:1], REQUESTS) == 2
    assert engines_per_rank(8, sample_traces, REQUESTS[:1]) == 1


@pytest.mark.slow
def test_two_engines_per_rank_give_the_tables_of_one(sample_traces):
    one = RankSet(sample_traces, jobs=2).run(REQUESTS)
    two = RankSet(sample_traces, jobs=4).run(REQUESTS)
    assert list(two) == list(one)
    for table, rows in one.items():
        pd.testing.assert_frame_equal(two[table], rows, obj=table)
    # the groups each rank is mapped in, as the set plans them: two engines per rank here ...
    requests = [QueryRequest(name, name) for name in ("kernel_summary", "rank_summary", "gpu_gaps", "gap_causes")]
    split = [["rank_summary", "gap_causes"], ["kernel_summary", "gpu_gaps"]]
    assert _tables(RankSet(sample_traces, jobs=4).map_groups(requests)) == split
    assert _tables(RankSet(sample_traces, jobs=3).map_groups(requests)) == [[r.table for r in requests]]
    assert _tables(RankSet(sample_traces, jobs=4, executor="dask").map_groups(requests)) == [
        [r.table for r in requests]]  # a Dask worker maps a rank's whole batch
    # ... one rank with two jobs: kept loaded here by default (a notebook's repeated calls) ...
    kept = RankSet(sample_traces[:1], jobs=2)
    assert _tables(kept.map_groups(requests)) == [[r.table for r in requests]]
    # ... else in two engines (analyze's one batch), until a call has loaded it here
    single = RankSet(sample_traces[:1], jobs=2, plan=BatchPlan(tuple(requests)))
    assert _tables(single.map_groups(requests)) == split
    single.query("SELECT 1 AS one")
    assert _tables(single.map_groups(requests)) == [[r.table for r in requests]]
    single.close()


def _tables(groups) -> list[list[str]]:
    return [[r.table for r in group] for group in groups]


@pytest.mark.slow
def test_a_forked_rank_frees_its_own_engine_before_waiting_for_the_copy(sample_traces, monkeypatch):
    """analyze's first run forks the loaded engine for the late queries: this process frees its
    engine once its own group is done (its pages are then the copy's alone), and the tables
    are those of one engine."""
    requests = [QueryRequest(name, name) for name in ("kernel_summary", "rank_summary", "gpu_gaps", "gap_causes")]
    trace = sample_traces[0]
    groups = split_requests(requests)
    assert len(split_again(groups[0])) == 2  # the copy forks again: its tables are checked too
    work = RankWork(trace.path, tuple(tuple(g) for g in groups), EngineOptions(), fork_engine=True)
    events = []
    close, result = Engine.close, ForkedCall.result

    def recording_close(engine):
        events.append("close" if engine._client is not None else "closed again")
        close(engine)

    def recording_result(call):
        events.append("copy's rows")
        return result(call)

    monkeypatch.setattr(Engine, "close", recording_close)
    monkeypatch.setattr(ForkedCall, "result", recording_result)
    forked = rank_rows(work).value()
    # freed before this process waits for the copy's rows, then closed again (a no-op) as its
    # block ends
    assert events[:3] == ["close", "copy's rows", "closed again"]
    monkeypatch.undo()
    single = rank_rows(RankWork(trace.path, (tuple(requests),), EngineOptions())).value()
    assert sorted(forked) == sorted(single)
    for table, rows in single.items():
        pd.testing.assert_frame_equal(forked[table], rows, obj=table)
