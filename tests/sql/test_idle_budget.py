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


@pytest.mark.parametrize("name", [n for n in available_sets() if n == "t36_tp2"])
def test_collective_wait_names_the_late_rank_and_its_host_cause(merged_sets, name):
    # t36_tp2: TP1 reaches the all-reduces first and spins in them until TP0 arrives
    _, _, engine = merged_sets(name)
    waits = run_query(engine, "collective_wait")
    skew = run_query(engine, "collective_skew")
    tp1 = waits[waits["rank"] == "TP1"]
    assert set(tp1["late_rank"]) == {"TP0"}
    assert tp1["wait_ns"].sum() > 150e6  # ~205 ms
    late_tp0 = skew[skew["last_arrival_rank"] == "TP0"]
    assert tp1["wait_ns"].sum() <= late_tp0["arrival_skew_ns"].sum()
    named = tp1[tp1["cause_kind"].notna()]
    assert named["wait_ns"].sum() > 0.9 * tp1["wait_ns"].sum()  # TP0's host cause named
    assert set(named["cause_kind"]) <= {"sync", "gc", "blocking", "gil", "busy", "unknown"}
