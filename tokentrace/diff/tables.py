"""The diff tables: two runs' query tables joined rank by rank (pandas joins only; every figure
comes from the queries' rows, :mod:`tokentrace.diff.runs`).

* :func:`rank_diff`: one row per rank of either run: idle share before and after, and whether
  the two can be compared (same profiler, same step definition).
* :func:`idle_budget_diff`: the two runs' own ``idle_budget`` side by side.
* :func:`cause_diff`: the host causes of steady host-caused gaps matched by (kind, function).
* :func:`kernel_diff`: the kernels matched by short name.
* :func:`step_diff`: step time percentiles and idle per step.

Every table but :func:`rank_diff` holds the ranks present in both runs only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tokentrace.diff.runs import RunTables
from tokentrace.report.kernel_names import short_name

# idle_budget's categories in the order its function's comment lists them (others follow, sorted).
BUDGET_ORDER = ("startup", "host_busy", "host_blocking", "host_sync", "host_gil", "host_gc",
                "host_unknown", "no_work", "graph_replay", "gpu_wait", "untraced", "short_gaps")
NO_FRAME = "(no host frame)"


def _rank_facts(run: RunTables) -> pd.DataFrame:
    """Per rank: profiler, step definition, steps, active window and idle."""
    windows = run.tables["gpu_windows"][["rank", "active_ns", "idle_ns", "idle_share", "kernels"]]
    health = run.tables["trace_health"][["rank", "gpu_format"]]
    summary = run.tables["rank_summary"][["rank", "step_name", "step_source", "steps"]]
    facts = windows.merge(health, on="rank", how="outer").merge(summary, on="rank", how="outer")
    facts["step"] = [_step_text(n, s) for n, s in zip(facts["step_name"], facts["step_source"])]
    return facts.drop(columns=["step_name", "step_source"])


def _step_text(name, source) -> str:
    """``schedule (auto)``: the step definition without the frame's file:line; '' without steps."""
    if not isinstance(name, str) or not isinstance(source, str):
        return ""
    return f"{name.split(' (')[0]} ({source})"


def rank_diff(before: RunTables, after: RunTables) -> pd.DataFrame:
    """One row per rank tag of either run.

    Columns: ``rank``, ``status`` (``both``, ``before only``, ``after only``), ``comparable``
    (both runs, the same ``gpu_format`` and the same step definition), ``before_``/``after_``
    ``gpu_format``, ``step`` (``name (source)``), ``steps``, ``kernels`` (GPU activities of the
    active window, ``gpu_windows.kernels``), ``active_ns``, ``idle_ns``,
    ``idle_share``, ``idle_per_step_ns``, and ``delta_idle_ns``, ``delta_share_points``
    ((after - before) share x 100), ``delta_idle_per_step_ns``.
    """
    facts = _rank_facts(before).merge(_rank_facts(after), on="rank", how="outer",
                                      suffixes=("_b", "_a"), indicator=True)
    out = pd.DataFrame({"rank": facts["rank"]})
    out["status"] = facts["_merge"].map({"both": "both", "left_only": "before only",
                                         "right_only": "after only"}).astype(str)
    for side, suffix in (("before", "_b"), ("after", "_a")):
        for column in ("gpu_format", "step", "steps", "kernels", "active_ns", "idle_ns", "idle_share"):
            out[f"{side}_{column}"] = facts[column + suffix]
        steps = out[f"{side}_steps"]
        out[f"{side}_idle_per_step_ns"] = (out[f"{side}_idle_ns"] // steps).where(steps > 0)
    out["comparable"] = ((out["status"] == "both")
                         & (out["before_gpu_format"].fillna("") == out["after_gpu_format"].fillna(""))
                         & (out["before_step"] == out["after_step"]))
    out["delta_idle_ns"] = out["after_idle_ns"] - out["before_idle_ns"]
    out["delta_share_points"] = (out["after_idle_share"] - out["before_idle_share"]) * 100
    out["delta_idle_per_step_ns"] = out["after_idle_per_step_ns"] - out["before_idle_per_step_ns"]
    return out.sort_values("rank", kind="stable").reset_index(drop=True)


def matched_ranks(ranks: pd.DataFrame) -> list[str]:
    """The ranks present in both runs (the rows of the other tables)."""
    return ranks.loc[ranks["status"] == "both", "rank"].tolist()


def _side_by_side(before: pd.DataFrame, after: pd.DataFrame, keys: list[str],
                  values: list[str]) -> pd.DataFrame:
    """Outer join on ``keys``; ``before_<v>``/``after_<v>`` for each value, 0 where absent."""
    # keys as Python objects: pandas cannot join arrow-backed strings of an empty table
    left = _object_keys(before[keys + values], keys).rename(columns={v: f"before_{v}" for v in values})
    right = _object_keys(after[keys + values], keys).rename(columns={v: f"after_{v}" for v in values})
    joined = left.merge(right, on=keys, how="outer")
    for value in values:
        for side in ("before", "after"):
            joined[f"{side}_{value}"] = joined[f"{side}_{value}"].fillna(0)
    return joined


def _object_keys(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return table.astype({k: object for k in keys})


def _per_step(joined: pd.DataFrame, steps: dict, column: str, name: str, ns: bool = True) -> None:
    """Adds ``<side>_<name>`` = ``<side>_<column>`` / the rank's steps (ns: floored) and
    ``delta_<name>``; NULL without steps."""
    for side in ("before", "after"):
        count = joined["rank"].map(steps[side]).astype("float64")
        value = joined[f"{side}_{column}"] / count.where(count > 0)
        joined[f"{side}_{name}"] = np.floor(value) if ns else value
    joined[f"delta_{name}"] = joined[f"after_{name}"] - joined[f"before_{name}"]


def _steps(before: RunTables, after: RunTables) -> dict[str, dict[str, int]]:
    return {side: dict(zip(run.tables["rank_summary"]["rank"], run.tables["rank_summary"]["steps"]))
            for side, run in (("before", before), ("after", after))}


def idle_budget_diff(before: RunTables, after: RunTables, ranks: list[str]) -> pd.DataFrame:
    """``idle_budget`` of both runs side by side, per rank and category (every category of
    either run, 0 where absent).

    Columns: ``rank``, ``category``, ``before_ns``, ``after_ns``, ``delta_ns``,
    ``before_share``, ``after_share``, ``delta_share`` (fractions of each run's own idle),
    ``before_gaps``, ``after_gaps``, ``before_per_step_ns``, ``after_per_step_ns``,
    ``delta_per_step_ns`` (idle_ns / the rank's steps, floored; NULL without steps).
    """
    sides = []
    for run in (before, after):
        budget = run.tables["idle_budget"]
        budget = budget[budget["rank"].isin(ranks)]
        sides.append(budget.rename(columns={"idle_ns": "ns"})[["rank", "category", "ns", "share", "gaps"]])
    joined = _side_by_side(*sides, keys=["rank", "category"], values=["ns", "share", "gaps"])
    joined["delta_ns"] = joined["after_ns"] - joined["before_ns"]
    joined["delta_share"] = joined["after_share"] - joined["before_share"]
    _per_step(joined, _steps(before, after), "ns", "per_step_ns")
    order = {c: i for i, c in enumerate(BUDGET_ORDER)}
    joined["_order"] = joined["category"].map(order).fillna(len(order))
    joined = joined.sort_values(["rank", "_order", "category"], kind="stable")
    columns = ["rank", "category", "before_ns", "after_ns", "delta_ns", "before_share",
               "after_share", "delta_share", "before_gaps", "after_gaps", "before_per_step_ns",
               "after_per_step_ns", "delta_per_step_ns"]
    return _ints(joined[columns].reset_index(drop=True), ["before_ns", "after_ns", "delta_ns",
                                                          "before_gaps", "after_gaps"])


def _causes(run: RunTables, ranks: list[str]) -> pd.DataFrame:
    """Per rank and (kind, function): the steady host-caused gaps' count, stalls, idle they
    explain (summed ``cause_ns``) and the frame explaining most of it."""
    gaps = run.tables["gap_causes"]
    gaps = gaps[(gaps["by_host"] == 1) & (gaps["phase"] == "steady") & gaps["rank"].isin(ranks)].copy()
    gaps["kind"] = gaps["cause_kind"].fillna("unknown")
    gaps["function"] = gaps["cause_function"].fillna(NO_FRAME)
    gaps["stall_idle_ns"] = gaps["cause_ns"].where(gaps["is_stall"] == 1, 0)
    keys = ["rank", "kind", "function"]
    sums = gaps.groupby(keys, as_index=False).agg(
        gaps=("dur", "size"), stalls=("is_stall", "sum"), idle_ns=("cause_ns", "sum"),
        stall_idle_ns=("stall_idle_ns", "sum"))
    frames = (gaps.groupby([*keys, "cause_frame"], as_index=False)["cause_ns"].sum()
              .sort_values([*keys, "cause_ns"], ascending=[True, True, True, False], kind="stable")
              .drop_duplicates(keys).rename(columns={"cause_frame": "frame"}))
    return sums.merge(frames[[*keys, "frame"]], on=keys, how="left")


def cause_diff(before: RunTables, after: RunTables, ranks: list[str]) -> pd.DataFrame:
    """The causes of steady host-caused gaps (``gap_causes``: ``by_host`` 1, phase ``steady``)
    matched across runs by rank, kind and function name (its file:line may move).

    Columns: ``rank``, ``kind``, ``function``, ``status`` (``appeared``, ``disappeared``,
    ``changed``, ``same``), ``before_frame``, ``after_frame`` (``func (file:line)`` explaining
    most of its idle), ``before_``/``after_`` ``gaps``, ``stalls``, ``idle_ns`` (summed
    ``cause_ns``), ``stall_idle_ns`` (of its stalls), ``idle_per_step_ns``, and
    ``delta_idle_ns``, ``delta_idle_per_step_ns``. Largest change first per rank.
    """
    values = ["gaps", "stalls", "idle_ns", "stall_idle_ns"]
    left, right = _causes(before, ranks), _causes(after, ranks)
    keys = ["rank", "kind", "function"]
    joined = _side_by_side(left.drop(columns="frame"), right.drop(columns="frame"), keys, values)
    for side, table in (("before", left), ("after", right)):
        frames = _object_keys(table[[*keys, "frame"]], keys).rename(columns={"frame": f"{side}_frame"})
        joined = joined.merge(frames, on=keys, how="left")
    joined["delta_idle_ns"] = joined["after_idle_ns"] - joined["before_idle_ns"]
    _per_step(joined, _steps(before, after), "idle_ns", "idle_per_step_ns")
    joined["status"] = np.select(
        [joined["before_gaps"] == 0, joined["after_gaps"] == 0,
         (joined["delta_idle_ns"] != 0) | (joined["before_gaps"] != joined["after_gaps"])],
        ["appeared", "disappeared", "changed"], "same")
    joined = _largest_change_first(joined, "delta_idle_ns")
    columns = [*keys, "status", "before_frame", "after_frame",
               *[f"{s}_{v}" for v in values for s in ("before", "after")], "delta_idle_ns",
               "before_idle_per_step_ns", "after_idle_per_step_ns", "delta_idle_per_step_ns"]
    return _ints(joined[columns], [f"{s}_{v}" for v in values for s in ("before", "after")]
                 + ["delta_idle_ns"])


def _kernels(run: RunTables, ranks: list[str]) -> pd.DataFrame:
    rows = run.tables["kernel_summary"]
    rows = rows[rows["rank"].isin(ranks)].copy()
    rows["kernel"] = rows["kernel"].map(short_name)
    return rows.groupby(["rank", "kernel"], as_index=False).agg(
        kernel_class=("kernel_class", "first"), count=("count", "sum"), total_ns=("total_dur_ns", "sum"))


def kernel_diff(before: RunTables, after: RunTables, ranks: list[str]) -> pd.DataFrame:
    """``kernel_summary`` of both runs matched by rank and short kernel name
    (:func:`tokentrace.report.kernel_names.short_name`: template arguments and parameters dropped).

    Columns: ``rank``, ``kernel``, ``kernel_class``, ``status`` (as :func:`cause_diff`),
    ``before_``/``after_`` ``count``, ``total_ns``, ``mean_ns``, ``count_per_step``,
    ``total_per_step_ns``, and ``delta_total_ns``, ``delta_mean_ns``,
    ``delta_total_per_step_ns``. Largest change of GPU time per step first per rank.
    """
    left, right = _kernels(before, ranks), _kernels(after, ranks)
    classes = pd.concat([left, right]).drop_duplicates(["rank", "kernel"])[["rank", "kernel", "kernel_class"]]
    joined = _side_by_side(left.drop(columns="kernel_class"), right.drop(columns="kernel_class"),
                           ["rank", "kernel"], ["count", "total_ns"])
    joined = joined.merge(_object_keys(classes, ["rank", "kernel"]), on=["rank", "kernel"], how="left")
    for side in ("before", "after"):
        count = joined[f"{side}_count"]
        joined[f"{side}_mean_ns"] = joined[f"{side}_total_ns"] / count.where(count > 0)
    joined["delta_total_ns"] = joined["after_total_ns"] - joined["before_total_ns"]
    joined["delta_mean_ns"] = joined["after_mean_ns"] - joined["before_mean_ns"]
    steps = _steps(before, after)
    _per_step(joined, steps, "count", "count_per_step", ns=False)
    _per_step(joined, steps, "total_ns", "total_per_step_ns")
    joined["status"] = np.select(
        [joined["before_count"] == 0, joined["after_count"] == 0,
         (joined["delta_total_ns"] != 0) | (joined["before_count"] != joined["after_count"])],
        ["appeared", "disappeared", "changed"], "same")
    joined = _largest_change_first(joined, "delta_total_per_step_ns", "delta_total_ns")
    columns = ["rank", "kernel", "kernel_class", "status", "before_count", "after_count",
               "before_total_ns", "after_total_ns", "delta_total_ns", "before_mean_ns",
               "after_mean_ns", "delta_mean_ns", "before_count_per_step", "after_count_per_step",
               "before_total_per_step_ns", "after_total_per_step_ns", "delta_total_per_step_ns"]
    return _ints(joined[columns], ["before_count", "after_count", "before_total_ns",
                                   "after_total_ns", "delta_total_ns"])


# step_diff's metrics, in order: (name, step_breakdown column, statistic).
STEP_METRICS = (("step_p50_ns", "dur", 0.5), ("step_p90_ns", "dur", 0.9), ("step_p99_ns", "dur", 0.99),
                ("step_mean_ns", "dur", "mean"), ("idle_per_step_ns", "idle_ns", "mean"),
                ("idle_p50_ns", "idle_ns", 0.5), ("idle_p90_ns", "idle_ns", 0.9),
                ("busy_per_step_ns", "gpu_busy_ns", "mean"))


def _step_stats(run: RunTables, rank: str) -> dict[str, float]:
    rows = run.tables["step_breakdown"]
    rows = rows[(rows["rank"] == rank) & (rows["open"] != 1)]
    stats = {"steps": float(len(rows))}
    for name, column, stat in STEP_METRICS:
        values = rows[column]
        stats[name] = (np.nan if values.empty else float(values.mean()) if stat == "mean"
                       else float(values.quantile(stat)))
    return stats


def step_diff(before: RunTables, after: RunTables, ranks: list[str]) -> pd.DataFrame:
    """Per rank, the steps of ``step_breakdown`` (closed steps only; a step's time is its
    window, start to the next step's start): count, percentiles of step time, idle per step.

    Columns: ``rank``, ``metric`` (``steps``, ``step_p50_ns``, ``step_p90_ns``,
    ``step_p99_ns``, ``step_mean_ns``, ``idle_per_step_ns`` (mean), ``idle_p50_ns``,
    ``idle_p90_ns``, ``busy_per_step_ns`` (mean)), ``before``, ``after``, ``delta``,
    ``change`` (after / before - 1; NULL when before is 0), ``before_step``, ``after_step``
    (the step definition, ``name (source)``).
    """
    defs = {side: dict(zip(f["rank"], f["step"])) for side, f in
            (("before", _rank_facts(before)), ("after", _rank_facts(after)))}
    rows = []
    for rank in ranks:
        b, a = _step_stats(before, rank), _step_stats(after, rank)
        for metric in b:
            rows.append({"rank": rank, "metric": metric, "before": b[metric], "after": a[metric]})
    table = pd.DataFrame(rows, columns=["rank", "metric", "before", "after"])
    table["delta"] = table["after"] - table["before"]
    table["change"] = table["after"] / table["before"].where(table["before"] != 0) - 1
    table["before_step"] = table["rank"].map(defs["before"])
    table["after_step"] = table["rank"].map(defs["after"])
    return table


def _largest_change_first(table: pd.DataFrame, *deltas: str) -> pd.DataFrame:
    size = table[deltas[0]].abs()
    for other in deltas[1:]:
        size = size.fillna(table[other].abs())
    return (table.assign(_size=size).sort_values(["rank", "_size"], ascending=[True, False], kind="stable")
            .drop(columns="_size").reset_index(drop=True))


def _ints(table: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Counts and ns sums as int64 (the outer joins made them float)."""
    return table.astype({c: "int64" for c in columns})
