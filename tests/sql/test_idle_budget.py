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


@pytest.mark.parametrize("name", available_sets() + serving_sets())
def test_short_gaps_per_step(merged_sets, name):
    _, _, engine = merged_sets(name)
    budget = run_query(engine, "idle_budget")
    steps = run_query(engine, "step_breakdown").groupby("rank")
    short = budget[budget["category"] == "short_gaps"].set_index("rank")
    # the rest of the idle time is exactly the idle intervals under min_gap_us (100 µs)
    direct = engine.query("INCLUDE PERFETTO MODULE tokentrace.gaps; SELECT rank, COUNT(*) AS gaps, "
                          "SUM(dur) AS idle_ns FROM tt_gpu_idle WHERE dur < 100000 GROUP BY rank").set_index("rank")
    assert short["gaps"].to_dict() == direct["gaps"].to_dict()
    assert short["idle_ns"].to_dict() == direct["idle_ns"].to_dict()
    assert (short["idle_ns"] >= steps["idle_short_ns"].sum().reindex(short.index)).all()  # steps: part of it
    assert budget.groupby("rank")["steps"].nunique().eq(1).all()
    assert short["steps"].to_dict() == steps.size().to_dict()
    with_steps = budget[budget["steps"] > 0]
    assert (with_steps["gaps_per_step"] == with_steps["gaps"] / with_steps["steps"]).all()
    assert (with_steps["idle_per_step_ns"] == with_steps["idle_ns"] // with_steps["steps"]).all()


@pytest.mark.parametrize("name", [n for n in available_sets() if n == "t39_tp2"])
def test_eager_decode_pays_launch_gaps_every_step(merged_sets, name):
    # 120 eager decode steps of ~67 kernels each: ~63 sub-100 µs gaps and ~2 ms of idle per step
    _, _, engine = merged_sets(name)
    budget = run_query(engine, "idle_budget")
    short = budget[budget["category"] == "short_gaps"].set_index("rank")
    assert (short["steps"] == 120).all()
    assert short["gaps_per_step"].between(50, 80).all()
    assert short["idle_per_step_ns"].between(1.5e6, 2.5e6).all()
    assert short["hint"].notna().all()  # eager: CUDA graphs would remove most of it
    none = run_query(engine, "idle_budget", {"step_name": "no_such_step", "rank": "TP0"})
    assert (none["steps"] == 0).all() and none["gaps_per_step"].isna().all()
    assert none["idle_per_step_ns"].isna().all() and abs(none["share"].sum() - 1) <= 0.001
