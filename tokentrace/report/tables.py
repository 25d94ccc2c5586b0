"""The report's tables, picked from the query rows: each gap's cause, the per-rank summary, the
longest stalls, plain-language health warnings. Picking only: every figure comes from SQL."""

from __future__ import annotations

import pandas as pd

RANK_COLUMNS = ["rank", "dp", "cp", "tp", "stage"]
GAP_CLASSES = ("host_late", "launch_overhead", "gpu_queued", "no_link")
# Host-caused steady gaps at least this long are stalls (the summary's top cause); shorter ones
# are the per-step host overhead (launch paths, tokenizing), reported apart.
STALL_MIN_US = 2000


def step_warning(step_name: str) -> str:
    """The warning when ``step_breakdown`` finds no step of that name."""
    return (f"no step named '{step_name}' in this trace; pass --step-name <host frame or scope> "
            "for per-step figures")


def gap_attribution(gaps: pd.DataFrame, stalls: pd.DataFrame,
                    stall_min_ns: int) -> pd.DataFrame:
    """``gpu_gaps`` rows with their cause (the ``host_stalls`` row with frame_rank 1):
    ``cause_function``, ``cause_frame``, ``cause_self_ns``, ``label`` (written on the timeline)
    and ``is_stall`` (steady, host-caused, at least ``stall_min_ns``)."""
    first = stalls[stalls["frame_rank"] == 1] if len(stalls) else stalls
    causes = pd.DataFrame({
        "rank": first.get("rank", pd.Series(dtype="object")),
        "gap_index": first.get("gap_index", pd.Series(dtype="int64")),
        "cause_function": first.get("function", pd.Series(dtype="object")),
        "cause_frame": first.get("frame", pd.Series(dtype="object")),
        "cause_self_ns": first.get("self_ns", pd.Series(dtype="int64"))})
    table = gaps.merge(causes, on=["rank", "gap_index"], how="left")
    label = table["cause_function"].fillna("(no host frame)")
    table["label"] = label.where(table["phase"] != "startup", "start-up: " + label)
    table["is_stall"] = ((table["phase"] == "steady") & (table["by_host"] == 1)
                         & (table["dur"] >= stall_min_ns))
    return table


def rank_summary(windows: pd.DataFrame, stall_causes: pd.DataFrame, short_gaps: pd.DataFrame,
                 steps: pd.DataFrame | None, step_name: str = "decode_step") -> pd.DataFrame:
    """One row per rank, picked from the query rows: ``gpu_windows`` (active window, idle by
    class), the first ``host_stall_profile`` row over stalls (``top_*``) and over shorter host
    gaps (``short_*``), and the number of ``step_breakdown`` rows (``steps``; per-step cost =
    top_idle_ns // steps)."""
    rows = []
    for _, window in windows.iterrows():
        rank = window["rank"]
        row = {c: window[c] for c in ["rank", "active_ns", "idle_ns", "idle_share", "gaps",
                                      "gap_idle_ns", "idle_startup_ns", "idle_host_steady_ns"]}
        row.update({f"idle_{c}_ns": window[f"idle_{c}_ns"] for c in GAP_CLASSES})
        top = _first_row(stall_causes, rank)
        row.update({"top_function": top.get("function"), "top_frame": top.get("frame"),
                    "top_idle_ns": int(top.get("self_ns", 0)), "top_gaps": int(top.get("gaps", 0)),
                    "stalls": int(top.get("rank_gaps", 0))})
        short = _first_row(short_gaps, rank)
        row.update({"short_idle_ns": int(short.get("gap_time_ns", 0)),
                    "short_top_function": short.get("function")})
        n_steps = int((steps["rank"] == rank).sum()) if steps is not None and len(steps) else 0
        row["steps"], row["step_name"] = n_steps, step_name
        row["top_idle_per_step_ns"] = row["top_idle_ns"] // n_steps if n_steps else None
        rows.append(row)
    return pd.DataFrame(rows)


def _first_row(profile: pd.DataFrame, rank: str) -> dict:
    mine = profile[(profile["rank"] == rank) & (profile["frame_rank"] == 1)] if len(profile) \
        else profile
    return mine.iloc[0].to_dict() if len(mine) else {}


def top_stalls(attributed: pd.DataFrame, origin_ns: int, per_rank: int = 10) -> pd.DataFrame:
    """The longest gaps of each rank with class, phase and cause; ``start_ns`` since
    ``origin_ns``."""
    columns = ["rank", "gap_index", "start_ns", "dur", "gap_class", "phase", "cause_function",
               "label", "cause_self_ns", "next_kernel"]
    if attributed.empty:
        return pd.DataFrame(columns=columns)
    longest = (attributed.sort_values(["rank", "dur"], ascending=[True, False])
               .groupby("rank", sort=False).head(per_rank))
    return longest.assign(start_ns=longest["ts"] - origin_ns)[columns].reset_index(drop=True)


def health_warnings(health: pd.DataFrame) -> list[str]:
    """Plain-language warnings from ``trace_health`` rows (empty when the trace looks sound)."""
    found = []
    for _, row in health.iterrows():
        rank = row["rank"]
        if (row["stats_errors"] or 0) > 0 or (row["stats_data_loss"] or 0) > 0:
            found.append(f"{rank}: Perfetto import problems: {row['stats_problems']}")
        if row["kernels"] == 0:
            found.append(f"{rank}: no GPU kernels in the trace")
        elif pd.isna(row["flow_coverage"]) or row["flow_coverage"] < 0.5:
            found.append(f"{rank}: {row['kernels_without_flow']} of {row['kernels']} kernels "
                         "have no launch flow (old Proton?): gaps are classed no_link")
        if row.get("viz_overflow") == 1:
            found.append(f"{rank}: VizTracer's buffer overflowed: early host events are lost")
        if row.get("align_method") == "estimated":
            spread = row.get("offset_interval_ns")
            width = "unknown" if pd.isna(spread) else f"{spread / 1e3:.1f} µs"
            found.append(f"{rank}: clocks aligned by estimate (no Proton anchor); "
                         f"uncertainty {width}")
    return found
