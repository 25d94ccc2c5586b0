"""Issue 46: a batch run's plan is data (`tokentrace.fleet.plan.plan_run`, pure): whether it
merges, streams the queries on the merge, follows the growing file, how many engines per rank
and where they run, as a table over jobs, ranks, sizes, cache warmth, fork and executor. The
code that runs the batch reads these choices (tests/fleet/test_streamed.py, test_split.py check
the tables it gives); `tokentrace analyze --plan` prints the plan and runs nothing."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from support.folder_state import folder_state
from tokentrace.catalog import list_queries
from tokentrace.cli import app
from tokentrace.fleet import QueryRequest
from tokentrace.fleet.plan import DASK, IN_PROCESS, POOL, Resources, plan_run

REQUESTS = [QueryRequest(spec.name, spec.name) for spec in list_queries()]
MB, GB = 1 << 20, 1 << 30
COLD, WARM = None, (40 * MB, 40 * MB)
SIZES = (30 * MB, 30 * MB)

# jobs, ranks, merged sizes (None: no cached merge), fork, backend, executor, keep loaded, memory
#   -> merge, streamed, follow, where, workers, engines per rank, fork the second engine
CASES = [
    (1, 2, COLD, True, "embedded", "local", False, 64 * GB, (True, True, True, IN_PROCESS, 1, 1, False)),
    (2, 2, COLD, True, "embedded", "local", False, 64 * GB, (True, True, True, POOL, 2, 1, False)),
    (4, 2, COLD, True, "embedded", "local", False, 64 * GB, (True, True, True, POOL, 2, 2, True)),
    (4, 2, COLD, False, "embedded", "local", False, 64 * GB, (True, True, False, POOL, 2, 2, False)),
    (4, 2, COLD, True, "native", "local", False, 64 * GB, (True, True, False, POOL, 2, 2, True)),
    (2, 1, COLD, True, "embedded", "local", False, 64 * GB, (True, True, True, IN_PROCESS, 1, 2, True)),
    (4, 2, WARM, True, "embedded", "local", False, 64 * GB, (False, False, False, POOL, 4, 2, False)),
    (3, 2, WARM, True, "embedded", "local", False, 64 * GB, (False, False, False, POOL, 2, 1, False)),
    (1, 2, WARM, True, "embedded", "local", False, 64 * GB, (False, False, False, IN_PROCESS, 1, 1, False)),
    (2, 1, WARM, True, "embedded", "local", False, 64 * GB, (False, False, False, POOL, 2, 2, False)),
    (2, 1, WARM, True, "embedded", "local", True, 64 * GB, (False, False, False, IN_PROCESS, 1, 1, False)),
    (4, 2, WARM, True, "embedded", "local", False, 256 * MB, (False, False, False, POOL, 2, 1, False)),
    (4, 2, COLD, True, "embedded", "dask", False, 64 * GB, (True, False, False, DASK, 0, 1, False)),
    (4, 2, WARM, True, "embedded", "dask://h:8786", True, 64 * GB, (False, False, False, DASK, 0, 1, False)),
]


@pytest.mark.parametrize(("jobs", "ranks", "merged", "fork", "backend", "executor", "keep", "memory",
                          "expected"), CASES)
def test_the_plan_over_jobs_ranks_cache_fork_and_executor(jobs, ranks, merged, fork, backend, executor,
                                                          keep, memory, expected):
    tags = ["TP0", "TP1"][:ranks]
    merged = None if merged is None else merged[:ranks]
    resources = Resources(jobs, executor, backend, fork, memory, merged, SIZES[:ranks], keep)
    plan = plan_run(tags, REQUESTS, resources)
    assert (plan.merge, plan.streamed, plan.follow_merge, plan.where, plan.workers, len(plan.groups),
            plan.fork_engine) == expected
    assert plan.ranks == tuple(tags)
    assert sorted(r.table for group in plan.groups for r in group) == sorted(r.table for r in REQUESTS)
    assert plan_run(tags, REQUESTS, resources) == plan  # pure


def test_the_plan_in_words():
    resources = Resources(4, "local", "embedded", True, 64 * GB, None, SIZES)
    lines = plan_run(["TP0", "TP1"], REQUESTS, resources).lines()
    assert lines[:4] == [
        "ranks: 2 (TP0, TP1)", "merge: merged now, each rank queried as it is merged",
        "load: loaded while the merge writes it",
        "queries: 2 engines per rank (the second a forked copy of the loaded one), in process pool of 2"]
    assert lines[4].startswith("  engine 1: ") and "gap_causes" in lines[4]
    # the forked copy's group in the two parts it runs in (tokentrace.fleet.execute)
    assert lines[4].startswith("  engine 1: gap_causes, rank_summary | collective_wait, host_stalls")


@pytest.mark.slow
def test_analyze_plan_prints_the_plan_and_runs_nothing(sample_t39, tmp_path):
    folder = shutil.copytree(sample_t39, tmp_path / "profile")
    before = folder_state(folder)
    result = CliRunner().invoke(app, ["analyze", str(folder), "--plan", "-j", "1"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:4] == [
        "ranks: 2 (TP0, TP1)", "merge: merged now, each rank queried as it is merged",
        "load: loaded while the merge writes it", "queries: one engine per rank, in this process"]
    assert folder_state(folder) == before and sorted(p.name for p in tmp_path.iterdir()) == ["profile"]
    missing = CliRunner().invoke(app, ["analyze", str(folder)])
    assert missing.exit_code == 1 and "-o is missing" in missing.output
