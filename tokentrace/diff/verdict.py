"""The diff in words: one line per rank on its GPU idle, the biggest movers of the idle budget,
the causes that appeared or disappeared, what the change recovered; and the regressions that
``--fail-on-regression`` gates on. Wording only: every figure is a cell of the diff tables."""

from __future__ import annotations

import pandas as pd

from tokentrace.units import format_ms


def _signed_ms(value_ns) -> str:
    return ("+" if value_ns > 0 else "") + format_ms(value_ns)


def _per_step(value_ns) -> str:
    return "" if pd.isna(value_ns) else f"{_signed_ms(value_ns)} ms per step, "


def rank_lines(ranks: pd.DataFrame) -> list[str]:
    """``TP0: GPU idle 28.8% -> 61.3% of active time (+32.5 points); 205.46 -> 450.10 ms
    (+244.64 ms); per step 1.03 -> 2.25 ms``, one per rank; ranks of one run only, or not
    comparable, say so."""
    lines = []
    for _, r in ranks.iterrows():
        if r["status"] != "both":
            lines.append(f"{r['rank']}: {r['status']} (not compared)")
            continue
        per_step = ("" if pd.isna(r["before_idle_per_step_ns"]) or pd.isna(r["after_idle_per_step_ns"])
                    else f"; per step {format_ms(r['before_idle_per_step_ns'])} -> "
                         f"{format_ms(r['after_idle_per_step_ns'])} ms")
        line = (f"{r['rank']}: GPU idle {r['before_idle_share']:.1%} -> {r['after_idle_share']:.1%} "
                f"of active time ({r['delta_share_points']:+.1f} points); "
                f"{format_ms(r['before_idle_ns'])} -> {format_ms(r['after_idle_ns'])} ms "
                f"({_signed_ms(r['delta_idle_ns'])} ms){per_step}")
        lines.append(line + _not_comparable(r))
    return lines


def _not_comparable(row) -> str:
    why = []
    if (row["before_gpu_format"] or "") != (row["after_gpu_format"] or ""):
        why.append(f"GPU profiler {row['before_gpu_format']} -> {row['after_gpu_format']}")
    if row["before_step"] != row["after_step"]:
        why.append(f"steps {row['before_step'] or 'none'} -> {row['after_step'] or 'none'}")
    return f" [not like for like: {'; '.join(why)}]" if why else ""


def _moved(rows: pd.DataFrame, delta: str) -> pd.DataFrame:
    return rows[rows[delta].fillna(0) != 0].reindex(
        rows[delta].abs().sort_values(ascending=False, kind="stable").index).dropna(subset=[delta])


def mover_lines(budget: pd.DataFrame, top: int = 4) -> list[str]:
    """Per rank, the idle-budget categories that moved most, split into those that fell and
    those that rose: by idle per step where both runs have steps (runs need not be equally
    long), else by absolute idle."""
    lines = []
    for rank, rows in budget.groupby("rank", sort=False):
        delta = "delta_per_step_ns" if rows["delta_per_step_ns"].notna().all() else "delta_ns"
        moved = _moved(rows, delta).head(top)
        if moved.empty:
            lines.append(f"{rank}: idle budget unchanged")
            continue
        fell = [_budget_item(r) for _, r in moved.iterrows() if r[delta] < 0]
        rose = [_budget_item(r) for _, r in moved.iterrows() if r[delta] > 0]
        parts = ([f"fell {', '.join(fell)}"] if fell else []) + ([f"rose {', '.join(rose)}"] if rose else [])
        lines.append(f"{rank}: biggest movers: {'; '.join(parts)}")
    return lines


def _budget_item(row) -> str:
    return (f"{row['category']} {_signed_ms(row['delta_ns'])} ms ({_per_step(row['delta_per_step_ns'])}"
            f"share {row['before_share']:.1%} -> {row['after_share']:.1%})")


def stall_kind_lines(causes: pd.DataFrame) -> list[str]:
    """Per rank, the stalls by cause kind: ``blocking 4 -> 0 stalls (16.38 -> 0.00 ms)``, the
    kinds whose stall idle fell and rose named last."""
    lines = []
    for rank, rows in causes.groupby("rank", sort=False):
        kinds = rows.groupby("kind")[["before_stalls", "after_stalls", "before_stall_idle_ns",
                                      "after_stall_idle_ns"]].sum()
        kinds = kinds[(kinds["before_stalls"] > 0) | (kinds["after_stalls"] > 0)]
        if kinds.empty:
            continue
        delta = kinds["after_stall_idle_ns"] - kinds["before_stall_idle_ns"]
        kinds = kinds.loc[delta.abs().sort_values(ascending=False, kind="stable").index]
        items = [f"{kind} {int(k['before_stalls'])} -> {int(k['after_stalls'])} "
                 f"({format_ms(k['before_stall_idle_ns'])} -> {format_ms(k['after_stall_idle_ns'])} ms)"
                 for kind, k in kinds.iterrows()]
        fell, rose = [k for k in kinds.index if delta[k] < 0], [k for k in kinds.index if delta[k] > 0]
        tail = "".join(f"; {word}: {', '.join(names)}" for word, names in (("fell", fell), ("rose", rose)) if names)
        lines.append(f"{rank}: stalls by kind {', '.join(items)}{tail}")
    return lines


def cause_lines(causes: pd.DataFrame, top: int = 4) -> list[str]:
    """Per rank, the causes that disappeared and appeared (largest first), as
    ``function (kind) N ms``."""
    lines = []
    for rank, rows in causes.groupby("rank", sort=False):
        parts = []
        for status, column in (("disappeared", "before_idle_ns"), ("appeared", "after_idle_ns")):
            picked = rows[rows["status"] == status].sort_values(column, ascending=False, kind="stable")
            if not picked.empty:
                items = [f"{r['function']} ({r['kind']}) {format_ms(r[column])} ms"
                         for _, r in picked.head(top).iterrows()]
                more = f" and {len(picked) - top} more" if len(picked) > top else ""
                parts.append(f"{status} {', '.join(items)}{more}")
        if parts:
            lines.append(f"{rank}: causes {'; '.join(parts)}")
    return lines


def step_name(definition) -> str:
    """The step's slice name of a step definition ``name (source)``; '' for none."""
    return definition.rsplit(" (", 1)[0] if isinstance(definition, str) else ""


def _has_steps(row, side: str) -> bool:
    count = row[f"{side}_steps"]
    return not pd.isna(count) and count > 0


def _same_step(row) -> bool:
    """Both runs have steps, of the same name: per-step figures compare."""
    return (_has_steps(row, "before") and _has_steps(row, "after")
            and step_name(row["before_step"]) == step_name(row["after_step"]))


def _change(before, after) -> str:
    return "" if pd.isna(before) or pd.isna(after) or not before else f" ({after / before - 1:+.1%})"


def step_lines(steps: pd.DataFrame, ranks: pd.DataFrame) -> list[str]:
    """Per rank of both runs, the work before the idle: ``TP0: step time p50 76.88 -> 114.74 ms
    (+49.3%), p90 79.82 -> 166.40 ms (+108.5%); GPU busy per step 64.76 -> 119.56 ms (+84.6%);
    6 -> 6 steps of ProfilerStep#N``. Without steps on a side: the GPU's active span per kernel
    (active window / GPU activities) instead, and which side has no step."""
    table = steps.set_index(["rank", "metric"])
    lines = []
    for _, r in ranks[ranks["status"] == "both"].iterrows():
        rank, has = r["rank"], [_has_steps(r, side) for side in ("before", "after")]
        if all(has):
            value = {m: (table.loc[(rank, m), "before"], table.loc[(rank, m), "after"])
                     for m in ("step_p50_ns", "step_p90_ns", "busy_per_step_ns")}
            text = {m: f"{format_ms(b)} -> {format_ms(a)} ms{_change(b, a)}" for m, (b, a) in value.items()}
            names = [step_name(r["before_step"]), step_name(r["after_step"])]
            what = names[0] if names[0] == names[1] else f"{names[0]} before, {names[1]} after (not the same step)"
            lines.append(f"{rank}: step time p50 {text['step_p50_ns']}, p90 {text['step_p90_ns']}; GPU busy per "
                         f"step {text['busy_per_step_ns']}; {int(r['before_steps'])} -> {int(r['after_steps'])} "
                         f"steps of {what}")
            continue
        side = "either" if not any(has) else "before" if not has[0] else "after"
        span = [r[f"{s}_active_ns"] / r[f"{s}_kernels"] if r[f"{s}_kernels"] else float("nan")
                for s in ("before", "after")]
        lines.append(f"{rank}: no step on the {side} side; GPU active span per kernel "
                     f"{span[0] / 1e3:.2f} -> {span[1] / 1e3:.2f} µs{_change(*span)} "
                     f"({format_ms(r['before_active_ns'])} ms / {int(r['before_kernels'])} -> "
                     f"{format_ms(r['after_active_ns'])} ms / {int(r['after_kernels'])} kernels)")
    return lines


def recovered_lines(causes: pd.DataFrame, ranks: pd.DataFrame, unlike: str = "") -> list[str]:
    """Per rank, the GPU idle the disappeared causes used to cost (before), in ms and per step:
    what the change recovered -- said only where the same step exists on both sides and the runs
    are like for like (``unlike``: why not, from :func:`~tokentrace.diff.setup.setup_line`);
    elsewhere the same figure is given without calling it recovered."""
    lines = []
    rows = ranks.set_index("rank")
    for rank, gone in causes[causes["status"] == "disappeared"].groupby("rank", sort=False):
        r = rows.loc[rank]
        total = gone["before_idle_ns"].sum()
        kinds = ", ".join(f"{k} {format_ms(v)} ms" for k, v in
                          gone.groupby("kind")["before_idle_ns"].sum().sort_values(ascending=False).items())
        why = (unlike or ("" if _same_step(r) else "no step on one side" if not
                          (_has_steps(r, "before") and _has_steps(r, "after")) else
                          f"steps differ ({step_name(r['before_step'])} vs {step_name(r['after_step'])})"))
        if why:
            lines.append(f"{rank}: the disappeared causes cost {format_ms(total)} ms of GPU idle before "
                         f"({kinds}); not counted as recovered: {why}")
            continue
        steps = int(r["before_steps"])
        lines.append(f"{rank}: recovered {format_ms(total)} ms of GPU idle ({format_ms(total // steps)} ms "
                     f"per step over {steps} steps) that the disappeared causes cost before ({kinds})")
    return lines


def regressions(ranks: pd.DataFrame, causes: pd.DataFrame, points: float,
                steps: pd.DataFrame | None = None) -> list[str]:
    """What ``--fail-on-regression points`` fails on: a rank whose step time p50 grew by more
    than ``points`` % (the same step on both sides), whose GPU idle share grew by more than
    ``points`` percentage points, or a new stall cause (stalls after, none before) whose stall
    idle is more than ``points`` % of the rank's active time after."""
    found = _slower_steps(ranks, steps, points) if steps is not None else []
    found += [f"{r['rank']}: GPU idle share grew by {r['delta_share_points']:.2f} points "
             f"({r['before_idle_share']:.1%} -> {r['after_idle_share']:.1%}), more than {points:g}"
             for _, r in ranks.iterrows() if r["status"] == "both" and r["delta_share_points"] > points]
    active = dict(zip(ranks["rank"], ranks["after_active_ns"]))
    new = causes[(causes["before_stalls"] == 0) & (causes["after_stalls"] > 0)]
    for _, c in new.iterrows():
        share = 100 * c["after_stall_idle_ns"] / active[c["rank"]] if active.get(c["rank"]) else 0.0
        if share > points:
            found.append(f"{c['rank']}: new stall cause {c['function']} ({c['kind']}): "
                         f"{int(c['after_stalls'])} stalls, {format_ms(c['after_stall_idle_ns'])} ms, "
                         f"{share:.2f} % of active time, more than {points:g}")
    return found


def _slower_steps(ranks: pd.DataFrame, steps: pd.DataFrame, points: float) -> list[str]:
    p50 = steps[steps["metric"] == "step_p50_ns"].set_index("rank")
    found = []
    for _, r in ranks[ranks["status"] == "both"].iterrows():
        if not _same_step(r) or r["rank"] not in p50.index:
            continue
        before, after = p50.loc[r["rank"], "before"], p50.loc[r["rank"], "after"]
        if before > 0 and 100 * (after / before - 1) > points:
            found.append(f"{r['rank']}: step time p50 grew by {100 * (after / before - 1):.2f} % "
                         f"({format_ms(before)} -> {format_ms(after)} ms, {step_name(r['after_step'])}), "
                         f"more than {points:g}")
    return found
