"""idle_budget: each rank's GPU idle time inside its active window, split into categories that
add up to all of it, on every real trace set (decode loops and serving engines)."""

from __future__ import annotations

import pytest

from support.merged_fixtures import available_sets, serving_sets
from tokentrace.catalog import run_query

CATEGORIES = {"startup", "host_busy", "host_blocking", "host_sync", "host_gil", "host_gc",
              "host_unknown", "graph_replay", "gpu_wait", "untraced", "short_gaps"}


@pytest.mark.parametrize("name", available_sets() + serving_sets())
def test_budget_adds_up_to_the_idle_time(merged_sets, name):
    _, _, engine = merged_sets(name)
    budget = run_query(engine, "idle_budget")
    windows = run_query(engine, "gpu_windows").set_index("rank")
    assert set(budget["category"]) <= CATEGORIES
    for rank, rows in budget.groupby("rank"):
        assert abs(rows["share"].sum() - 1) <= 0.001, (name, rank)
        assert rows["idle_ns"].sum() == windows.loc[rank, "idle_ns"] == rows["active_idle_ns"].iloc[0]
        assert (rows["idle_ns"] >= 0).all() and rows["category"].is_unique
    assert set(budget["rank"]) == set(windows.index)


@pytest.mark.parametrize("name", [n for n in serving_sets() if n == "engine_mixed"])
def test_every_stall_kind_has_its_share(merged_sets, name):
    _, _, engine = merged_sets(name)
    budget = run_query(engine, "idle_budget")
    for rank, rows in budget.groupby("rank"):
        shares = dict(zip(rows["category"], rows["share"]))
        for kind in ("host_busy", "host_blocking", "host_sync", "host_gil", "host_gc"):
            assert shares.get(kind, 0) > 0, (rank, kind, shares)
        assert shares["host_gc"] > 0.2  # two 45-105 ms collections
