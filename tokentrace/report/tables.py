"""The report's tables, picked from the query rows: the per-rank summary, the longest gaps per
rank, the kernels with readable names, plain-language health warnings. Picking only: every
figure, each gap's cause and whether it is a stall come from SQL (``gpu_windows``,
``rank_summary``, ``gap_causes``, ``idle_budget``, ``gpu_busy``, ``kernel_summary``)."""

from __future__ import annotations

import pandas as pd

from tokentrace import idle_categories
from tokentrace.catalog.identity import RANK_IDENTITY
from tokentrace.report.kernel_names import demangle, display_name
from tokentrace.units import format_ms

TOP_STALL_COLUMNS = ["rank", "gap_index", "ts", "start_ns", "dur", "gap_class", "phase",
                     "cause_kind", "cause_function", "cause_call", "label", "cause_ns", "next_kernel"]


def step_warning(step_name: str) -> str:
    """The warning when ``step_breakdown`` finds no step of that name ('' : none found)."""
    if not step_name:
        return ("no scheduler step found (no decode_step scope or frame, and no host frame that "
                "runs once per launch); pass --step-name <host frame or scope> for per-step figures")
    return (f"no step named '{step_name}' in this trace; pass --step-name <host frame or scope> "
            "for per-step figures")


def rank_table(windows: pd.DataFrame, summary: pd.DataFrame,
               budget: pd.DataFrame | None = None,
               waits: pd.DataFrame | None = None,
               busy: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per rank: its ``gpu_windows`` row (active window, idle by class and phase) next
    to its ``rank_summary`` row (top stall cause, shorter host gaps, steps, cost per step) and,
    given ``idle_budget`` rows, ``idle_budget``: its categories as text, largest first
    (``host_busy 12.50 ms (37%), host_gc 8.10 ms (24%), ...``; every category holding idle
    time, so the parts add up to the idle), ``budget_<category>_ns`` for every category (0 where absent: they add
    up to ``idle_ns``), ``host_caused_ns`` (the ``host_*`` categories' sum), ``short_gaps_per_step`` and ``short_idle_per_step_ns`` (its ``short_gaps`` row); given
    ``collective_wait`` rows, ``collective_wait_ns`` (the rank's wait inside collectives for late
    ranks) and ``collective_wait_for`` (the row with the longest wait: late rank and cause);
    given ``gpu_busy`` rows, ``busy_split`` (``compute 6.2%, nccl 7.3%, memory 0.0%`` of the
    active window)."""
    stall_columns = [c for c in summary.columns if c not in RANK_IDENTITY]
    table = windows.merge(summary[["rank", *stall_columns]], on="rank", how="left",
                          validate="one_to_one")
    if budget is not None:
        # every category that holds idle time is named, however small: the text adds up
        # (a dict, not groupby.apply: that gives an empty frame, not a series, when no rank
        # has idle time, e.g. one kernel)
        shown = budget[budget["idle_ns"] > 0]
        text: dict[str, list[str]] = {}
        for rank, category, idle, share in zip(shown["rank"], shown["category"], shown["idle_ns"],
                                               shown["share"]):
            text.setdefault(rank, []).append(f"{category} {format_ms(idle)} ms ({share:.0%})")
        table["idle_budget"] = table["rank"].map({r: ", ".join(parts) for r, parts in text.items()})
        for category in idle_categories.NAMES:
            held = budget[budget["category"] == category]
            table[budget_column(category)] = table["rank"].map(
                dict(zip(held["rank"], held["idle_ns"]))).fillna(0).astype("int64")
        table["host_caused_ns"] = table[[budget_column(c) for c in idle_categories.HOST_CAUSED]].sum(axis=1)
        hints = budget[budget["hint"].notna()] if "hint" in budget else budget.iloc[:0]
        table["idle_hint"] = table["rank"].map(dict(zip(hints["rank"], hints["hint"])))
        short = budget[budget["category"] == "short_gaps"]
        if "gaps_per_step" in short:
            table["short_gaps_per_step"] = table["rank"].map(dict(zip(short["rank"], short["gaps_per_step"])))
            table["short_idle_per_step_ns"] = table["rank"].map(
                dict(zip(short["rank"], short["idle_per_step_ns"])))
    if waits is not None:
        table["collective_wait_ns"] = table["rank"].map(waits.groupby("rank")["wait_ns"].sum())
        first = waits.drop_duplicates("rank")  # rows come longest wait first per rank
        table["collective_wait_for"] = table["rank"].map(dict(zip(first["rank"], [
            f"{late}" + (f" ({kind}: {func})" if isinstance(func, str) else "")
            for late, kind, func in zip(first["late_rank"], first["cause_kind"], first["cause_function"])])))
    if busy is not None:
        table["busy_split"] = table["rank"].map(dict(zip(busy["rank"], [
            f"compute {c:.1%}, nccl {n:.1%}, memory {m:.1%}"
            for c, n, m in zip(busy["compute_share"], busy["nccl_share"], busy["memory_share"])])))
    return table


def budget_column(category: str) -> str:
    """The summary column holding a rank's idle time in an ``idle_budget`` category."""
    return f"budget_{category}_ns"


def by_idle(table: pd.DataFrame) -> pd.DataFrame:
    """The per-rank rows sorted by GPU idle, most idle first (ties: rank order)."""
    return table.sort_values("idle_ns", ascending=False, kind="stable").reset_index(drop=True)


def detail_ranks(summary: pd.DataFrame, limit: int) -> list[str]:
    """The ``limit`` ranks with the most GPU idle (``summary`` from :func:`by_idle`): the ones
    the report shows in detail; every rank stays in the tables."""
    return summary["rank"].head(max(limit, 0)).tolist()


def of_ranks(rows: pd.DataFrame, ranks: list[str]) -> pd.DataFrame:
    """The rows of ``ranks`` only (rows without a rank column: all of them)."""
    return rows[rows["rank"].isin(ranks)] if "rank" in rows.columns else rows


KERNEL_COLUMNS = ["rank", "name", "kernel", "demangled", "kernel_class", "count", "total_dur_ns", "mean_dur_ns",
                  "p50_dur_ns", "gpu_time_share"]


def kernel_table(kernels: pd.DataFrame, per_rank: int = 12) -> pd.DataFrame:
    """The ``per_rank`` kernels of each rank with the most GPU time (``kernel_summary`` rows,
    longest total first), with ``name`` readable
    (:func:`~tokentrace.report.kernel_names.display_name`: demangled, shortened) and
    ``demangled`` the full C++ name (``kernel`` as recorded)."""
    top = kernels.groupby("rank", sort=False).head(per_rank).copy()
    top["name"] = top["kernel"].map(display_name)
    top["demangled"] = top["kernel"].map(demangle)
    if "kernel_class" not in top:
        top["kernel_class"] = None
    return top[KERNEL_COLUMNS].reset_index(drop=True)


def top_stalls(gap_causes: pd.DataFrame, per_rank: int = 10) -> pd.DataFrame:
    """The ``per_rank`` longest gaps of each rank (``gap_causes`` rows with ``dur_rank`` up to
    it), longest first, with class, phase, cause and start on the timeline."""
    if gap_causes.empty:
        return pd.DataFrame(columns=TOP_STALL_COLUMNS)
    longest = gap_causes[gap_causes["dur_rank"] <= per_rank]
    return (longest.sort_values(["rank", "dur_rank"], kind="stable")[TOP_STALL_COLUMNS]
            .reset_index(drop=True))


# A rank whose launches were found for fewer kernels than this is warned about; the same bound
# for launch flows (below it, most launches are inferred from host calls).
_COVERED = 0.5
# VizTracer's min_duration shows as a floor under the host slices (unfiltered, most calls of
# builtins last under 1 µs): judged over at least this many slices. VizTracer writes no
# min_duration in its report; tokenspeed starts it with TOKENSPEED_VIZTRACER_MIN_DURATION_US
# (default 100 µs, request_handler.py at f4d8ec6e).
_FILTER_FLOOR_NS = 1_000
_FILTER_MIN_SLICES = 1_000


def _known(value) -> bool:
    return value is not None and not pd.isna(value)


def _equals(row, column: str, value) -> bool:
    """``row[column] == value``, False where the column is missing or NULL."""
    known = row.get(column)
    return _known(known) and known == value


def health_warnings(health: pd.DataFrame) -> list[str]:
    """Plain-language problems from ``trace_health`` rows, one line each (empty when none
    holds); every line is computed from the row's facts."""
    found = []
    for _, row in health.iterrows():
        rank = row["rank"]
        if (row["stats_errors"] or 0) > 0 or (row["stats_data_loss"] or 0) > 0:
            found.append(f"{rank}: Perfetto import problems: {row['stats_problems']}")
        if row["kernels"] == 0:
            found.append(f"{rank}: no GPU kernels in the trace")
        elif not _known(row["launch_coverage"]) or row["launch_coverage"] < _COVERED:
            missing = row["kernels"] - row["kernels_with_launch"]
            found.append(f"{rank}: the launch of {missing} of {row['kernels']} kernels was not found "
                         f"({_no_launch_reason(row)}); their gaps are classed no_link")
        elif _equals(row, "is_merged", 1) and _known(row["flow_coverage"]) and row["flow_coverage"] < _COVERED:
            found.append(f"{rank}: only {row['kernels_with_flow']} of {row['kernels']} kernels "
                         f"({row['flow_coverage']:.0%}) have a launch flow{_no_flow_reason(row)}; the launches of "
                         f"{row['launch_coverage']:.0%} were found from host calls (Triton launcher, "
                         "CUDA-graph replay, the latest torch call): the launch times of those "
                         "without a flow are bounds")
        if _equals(row, "viz_overflow", 1):
            found.append(f"{rank}: VizTracer's buffer overflowed: early host events are lost")
        shortest = row.get("host_min_dur_ns")
        # (the torch profiler alone has no such filter: its host slices are its own events)
        if (_known(shortest) and row["host_slices"] >= _FILTER_MIN_SLICES and shortest >= _FILTER_FLOOR_NS
                and row.get("align_method") != "shared_clock"):
            found.append(f"{rank}: no host call shorter than {shortest / 1e3:.0f} µs in "
                         f"{row['host_slices']} (VizTracer's min_duration filter?): short calls, "
                         "kernel launches among them, are missing; record with VizTracer(min_duration=0) "
                         "(tokenspeed: TOKENSPEED_VIZTRACER_MIN_DURATION_US=0; its default is 100)")
        found += _alignment_problems(row)
        if _known(row.get("other_ranks")) and row["other_ranks"] > 0 and _equals(row, "overlapping_ranks", 0):
            apart = row.get("nearest_rank_ns")
            gap = f" (the nearest {apart / 1e9:.1f} s apart)" if _known(apart) else ""
            found.append(f"{rank}: its GPU never ran at the same time as another rank's{gap}: "
                         "recorded separately, so it is left out of rank skew, collective skew "
                         "and collective waits")
    return found


def ranks_apart(health: pd.DataFrame | None) -> bool:
    """Whether some rank never ran at the same time as any other (``trace_health``'s
    overlapping_ranks 0 beside other ranks): the cross-rank queries leave it out."""
    if health is None or "overlapping_ranks" not in health:
        return False
    return bool(((health["other_ranks"] > 0) & (health["overlapping_ranks"] == 0)).fillna(False).any())


def has_viztracer(row) -> bool:
    """Whether the rank's host side is a VizTracer report: a merged rank not recorded by the
    torch profiler alone (``align_method`` ``shared_clock``); a raw trace has none either."""
    return _equals(row, "is_merged", 1) and _known(row.get("align_method")) \
        and row.get("align_method") != "shared_clock"


def _no_launch_reason(row) -> str:
    """Why kernels have no found launch, in the terms of the rank's inputs: VizTracer's report
    only where one was given."""
    if row.get("proton_dialect") == "3.8":
        return ("triton <= 3.8 Proton records no launch flows, and no host call precedes them: "
                "is VizTracer's report cut?")
    if has_viztracer(row):
        return "no host call precedes them: is VizTracer's report cut?"
    if row.get("gpu_format") == "kineto" or row.get("proton_dialect") == "kineto":
        return ("no launch call with the same correlation id and no launch flow in the trace: "
                "were the runtime calls recorded (ProfilerActivity.CPU)?")
    return "no launch call or launch flow in the trace"


def _no_flow_reason(row) -> str:
    """Why a Proton trace has few flows, from its dialect."""
    if row.get("proton_dialect") == "3.8":
        return " (triton <= 3.8 Proton records none)"
    if row.get("gpu_format") == "proton":
        return (" (Proton draws one only for a launch inside a Proton scope, and for a CUDA-graph "
                "replay only to its first kernel)")
    return ""


def _alignment_problems(row) -> list[str]:
    rank, method = row["rank"], row.get("align_method")
    spread = row.get("offset_interval_ns")
    width = f"{spread / 1e3:.1f} µs" if _known(spread) else "unknown"
    if method == "estimated":
        return [f"{rank}: clocks aligned by estimate (no Proton anchor); uncertainty {width}"]
    if method == "offset":
        return [f"{rank}: clocks aligned by the offset given by hand "
                f"({row['offset_ns'] / 1e3:.1f} µs), not checked against anchors or launches"]
    if method == "anchors" and _equals(row, "anchor_consistent", 0):
        return [f"{rank}: the clock anchors disagree with the launch order (kernels would start "
                f"before their launch): the alignment may be off; launches allow a {width} interval"]
    return []


def health_summary(health: pd.DataFrame | None) -> str:
    """The line shown when :func:`health_warnings` finds nothing: what was checked, from the
    rows' facts (launch and flow coverage, how the clocks were aligned)."""
    if health is None or health.empty:
        return "No problems found (trace_health not run)"
    launches = health["kernels_with_launch"].sum() / max(health["kernels"].sum(), 1)
    flows = health["kernels_with_flow"].sum() / max(health["kernels"].sum(), 1)
    methods = {"anchors": "by the profilers' clock anchors", "shared_clock": "on one clock (the torch profiler's)",
               "estimated": "by estimate", "offset": "by a given offset"}
    aligned = ", ".join(dict.fromkeys(methods.get(m, "not aligned (raw trace)") for m in health["align_method"]))
    ranks = len(health)
    overlapped = "overlapping_ranks" in health and (health["overlapping_ranks"] > 0).all()
    together = f"; the {ranks} ranks ran at the same time" if ranks > 1 and overlapped else ""
    return (f"No problems: Perfetto loaded every event; launches found for {launches:.0%} of kernels "
            f"({flows:.0%} by launch flow); clocks aligned {aligned}{together}")
