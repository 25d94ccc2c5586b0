"""The stall analysis computed from query results (DataFrame in, DataFrame out), and the
``tokentrace analyze`` pipeline as one library call: :func:`analyze`.

Attribution: a GPU gap's *cause* is the innermost Python function (a VizTracer frame with a
``(file:line)``) that covers at least half of the host time seen in the gap, so a builtin like
``time.sleep`` is charged to the Python function that called it (``host_stall``), and the
scheduler loop around it is not charged at all. A function's *caused idle* is the time it ran
while the GPU was idle in gaps the host is responsible for (``host_late``, and ``no_link`` when
no launch flow says otherwise), capped at the gap's length.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
import warnings
from pathlib import Path

import pandas as pd

from tokentrace.analysis import GPU_WINDOW_SQL, LOOP_FRAMES_SQL
from tokentrace.errors import TokentraceWarning
from tokentrace.queries import list_queries

RANK_COLUMNS = ["rank", "dp", "cp", "tp", "stage"]
# Gap classes in which the host, not the GPU, kept the GPU waiting.
HOST_CLASSES = ("host_late", "no_link")
GAP_CLASSES = ("host_late", "launch_overhead", "gpu_queued", "no_link")
_PYTHON_FRAME = re.compile(r"\(.+:\d+\)\s*$")
# Host-caused gaps at least this long are stalls (the summary's top cause); shorter ones are
# the per-step host overhead (launch paths, tokenizing), summed and reported apart.
STALL_MIN_NS = 2_000_000
CAUSE_COLUMNS = ["rank", "gap_index", "cause_frame", "cause_function", "cause_overlap_ns"]


def is_python_frame(frame: str) -> bool:
    """True for a VizTracer Python frame ``func (file.py:12)``; False for builtins."""
    return bool(_PYTHON_FRAME.search(str(frame)))


def gap_causes(stalls: pd.DataFrame, cover: float = 0.5) -> pd.DataFrame:
    """One cause per gap: the innermost Python frame covering >= ``cover`` of the longest frame
    overlap in the gap (frame_rank 1 when no Python frame qualifies).

    Args:
        stalls: ``host_stalls`` rows (``rank, gap_index, frame, function, depth, total_ns,
            frame_rank``); ask it for enough frames per gap (``top`` >= 10) to see ancestors.

    Returns:
        ``rank, gap_index, cause_frame, cause_function, cause_overlap_ns``.
    """
    if stalls.empty:
        return pd.DataFrame(columns=CAUSE_COLUMNS)
    frames = stalls.assign(python=stalls["frame"].map(is_python_frame),
                           total=stalls["total_ns"].astype("float64"))
    longest = frames.groupby(["rank", "gap_index"])["total"].transform("max")
    keys = ["rank", "gap_index"]
    chosen = (frames[frames["python"] & (frames["total"] >= cover * longest)]
              .sort_values(keys + ["depth", "total"], ascending=[True, True, False, False])
              .drop_duplicates(keys))
    fallback = frames[frames["frame_rank"] == 1].drop_duplicates(keys)
    missing = ~fallback.set_index(keys).index.isin(chosen.set_index(keys).index)
    picked = pd.concat([chosen, fallback[missing]]).sort_values(keys)
    return pd.DataFrame({
        "rank": picked["rank"].to_numpy(), "gap_index": picked["gap_index"].to_numpy(),
        "cause_frame": picked["frame"].to_numpy(), "cause_function": picked["function"].to_numpy(),
        "cause_overlap_ns": picked["total_ns"].astype("int64").to_numpy()})


def attribute_gaps(gaps: pd.DataFrame, causes: pd.DataFrame,
                   loop_frames: frozenset[str] = frozenset(),
                   stall_min_ns: int = STALL_MIN_NS) -> pd.DataFrame:
    """``gpu_gaps`` rows with their cause, ``caused_ns`` (idle charged to the cause), ``label``
    (what the timeline writes on the gap) and ``is_stall`` (host-caused and >= stall_min_ns).

    ``caused_ns`` is the cause's overlap with the gap, capped at the gap, for host-caused
    classes (:data:`HOST_CLASSES`), else 0. A cause in ``loop_frames`` (a frame that encloses
    most of the profile, like the serving loop itself: fragmented work such as warm-up JIT
    compilation falls back to it) names no single function: it is charged nothing.
    """
    merged = gaps.merge(causes, on=["rank", "gap_index"], how="left")
    overlap = merged["cause_overlap_ns"].astype("float64").fillna(0)
    charged = merged["gap_class"].isin(HOST_CLASSES) & ~merged["cause_frame"].isin(loop_frames)
    merged["caused_ns"] = overlap.clip(upper=merged["dur"].astype("float64")).where(
        charged, 0).astype("int64")
    merged["label"] = merged["cause_function"].fillna("(no host frame)").where(
        ~merged["cause_frame"].isin(loop_frames), "(loop: no single function)")
    merged["is_stall"] = charged & (merged["dur"].astype("int64") >= stall_min_ns)
    return merged


def stall_profile(attributed: pd.DataFrame) -> pd.DataFrame:
    """Idle charged per function and rank: ``function, frame, rank, gaps, idle_ns``, largest
    first (the input of :func:`tokentrace.plots.plot_stall_profile`)."""
    charged = attributed[attributed["caused_ns"] > 0]
    if charged.empty:
        return pd.DataFrame(columns=["function", "frame", "rank", "gaps", "idle_ns"])
    table = (charged.groupby(["cause_function", "cause_frame", "rank"], as_index=False)
             .agg(gaps=("gap_index", "count"), idle_ns=("caused_ns", "sum"))
             .rename(columns={"cause_function": "function", "cause_frame": "frame"}))
    return table.sort_values(["idle_ns", "function", "rank"], ascending=[False, True, True],
                             ignore_index=True)


def rank_summary(windows: pd.DataFrame, attributed: pd.DataFrame,
                 steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per rank: active window, GPU idle (total and by class), the top cause of stalls and its
    cost, and the idle of short host-caused gaps with their top function.

    Returns:
        ``rank, active_ns, idle_ns, idle_share, gaps, idle_<class>_ns..., top_function,
        top_frame, top_idle_ns, top_gaps, steps, top_idle_per_step_ns, short_idle_ns,
        short_top_function`` (ns; shares 0..1; ``top_*`` over stalls, ``short_*`` over the
        shorter host-caused gaps).
    """
    rows = []
    for _, window in windows.iterrows():
        rank = window["rank"]
        gaps = attributed[attributed["rank"] == rank]
        active = int(window["last_end_ts"] - window["first_ts"])
        row = {"rank": rank, "active_ns": active, "idle_ns": int(gaps["dur"].sum()),
               "gaps": len(gaps)}
        row["idle_share"] = row["idle_ns"] / active if active else 0.0
        for gap_class in GAP_CLASSES:
            row[f"idle_{gap_class}_ns"] = int(gaps.loc[gaps["gap_class"] == gap_class,
                                                       "dur"].sum())
        row.update(_top_cause(gaps[gaps["is_stall"]], "top"))
        short = _top_cause(gaps[~gaps["is_stall"]], "short")
        row["short_idle_ns"] = int(gaps.loc[~gaps["is_stall"], "caused_ns"].sum())
        row["short_top_function"] = short["short_function"]
        n_steps = int((steps["rank"] == rank).sum()) if steps is not None and len(steps) else 0
        row["steps"] = n_steps
        row["top_idle_per_step_ns"] = row["top_idle_ns"] // n_steps if n_steps else None
        rows.append(row)
    return pd.DataFrame(rows)


def _top_cause(gaps: pd.DataFrame, prefix: str) -> dict:
    charged = gaps[gaps["caused_ns"] > 0]
    if charged.empty:
        return {f"{prefix}_function": None, f"{prefix}_frame": None, f"{prefix}_idle_ns": 0,
                f"{prefix}_gaps": 0}
    by_frame = charged.groupby(["cause_frame", "cause_function"])["caused_ns"].agg(
        ["sum", "count"])
    best_key = by_frame["sum"].idxmax()
    best = by_frame.loc[best_key]
    return {f"{prefix}_function": best_key[1], f"{prefix}_frame": best_key[0],
            f"{prefix}_idle_ns": int(best["sum"]), f"{prefix}_gaps": int(best["count"])}


def top_stalls(attributed: pd.DataFrame, origin_ns: int, per_rank: int = 10) -> pd.DataFrame:
    """The longest gaps of each rank with class and cause; ``start_ns`` since ``origin_ns``."""
    if attributed.empty:
        return pd.DataFrame(columns=["rank", "gap_index", "start_ns", "dur", "gap_class",
                                     "cause_function", "label", "caused_ns", "next_kernel"])
    longest = (attributed.sort_values(["rank", "dur"], ascending=[True, False])
               .groupby("rank", sort=False).head(per_rank))
    table = longest.assign(start_ns=longest["ts"] - origin_ns)
    return table[["rank", "gap_index", "start_ns", "dur", "gap_class", "cause_function",
                  "label", "caused_ns", "next_kernel"]].reset_index(drop=True)


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


# -- the analyze pipeline ---------------------------------------------------------------------

# Every query the report runs, in the order it runs them.
REPORT_QUERIES = ("trace_health", "kernel_summary", "gpu_gaps", "host_stalls",
                  "host_stall_profile", "launch_latency", "step_breakdown", "rank_skew",
                  "collective_skew")
# host_stalls frames per gap: enough to see the ancestors the attribution walks.
FRAMES_PER_GAP = 20


@dataclasses.dataclass
class AnalyzeResult:
    """What :func:`analyze` wrote and found.

    Attributes:
        output: the output folder.
        report: ``report.html`` (self-contained: plots embedded).
        trace: the combined merged trace the queries ran on (open it in the Perfetto UI).
        tables: ``{name: parquet path}`` for every query and computed table.
        plots: ``{name: png path}``.
        summary: :func:`rank_summary` rows (one per rank).
        top_stalls: :func:`top_stalls` rows.
        warnings: health and merge warnings, each once.
        skipped: bundled queries this installation lacks (nothing written for them).
        seconds: wall time of each phase (``merge``, ``load``, ``queries``, ``write``).
    """

    output: Path
    report: Path
    trace: Path
    tables: dict[str, Path]
    plots: dict[str, Path]
    summary: pd.DataFrame
    top_stalls: pd.DataFrame
    warnings: list[str]
    skipped: list[str]
    seconds: dict[str, float]


def analyze(folder: str | os.PathLike, output: str | os.PathLike, *, min_gap_us: float = 100,
            launch_overhead_us: float = 10, step_name: str = "decode_step",
            stall_min_us: float = STALL_MIN_NS / 1000, jobs: int = 1,
            engine: str = "embedded", **merge_options) -> AnalyzeResult:
    """Profile folder -> merged trace, every stall query (Parquet), plots (PNG), report.html.

    The merge is cached in ``<output>/merged/`` and reused while the inputs are unchanged.

    Args:
        folder: the profile folder (one VizTracer + Proton pair per rank).
        output: the folder to write (created).
        min_gap_us: shortest GPU idle interval reported as a gap.
        launch_overhead_us: gaps up to this long after an early launch are launch overhead.
        step_name: the slice name of one scheduler step (``step_breakdown``, ``rank_skew``).
        stall_min_us: host-caused gaps at least this long are stalls (the top cause).
        jobs: ranks merged in parallel.
        engine: ``embedded``, ``native`` or ``remote``.
        **merge_options: ``align``, ``offset_us``, ``profile_id`` (see :func:`merge`).

    Example::

        result = analyze("profiles/run2", "out/run2")
        print(result.summary[["rank", "top_function", "top_idle_ns"]])

    Raises:
        TokentraceError: bad inputs, merge, engine or query failures (see the message).
    """
    from tokentrace.analysis_cache import merged_folder
    from tokentrace.engine import open_trace

    out, clock = Path(output), _Clock()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TokentraceWarning)
        merged = merged_folder(folder, out / "merged", jobs=jobs, **merge_options)
    clock.lap("merge")
    params = {"min_gap_us": min_gap_us, "launch_overhead_us": launch_overhead_us,
              "step_name": step_name, "top": FRAMES_PER_GAP}
    with open_trace(merged.path, engine, warn=False) as loaded:
        clock.lap("load")
        results, used, skipped = _run_report_queries(loaded, params)
        clock.lap("queries")
        tables = _write_query_tables(results, used, loaded, out / "tables")
    computed = compute_report_tables(results, int(stall_min_us * 1000))
    tables.update(_write_computed(computed, out / "tables"))
    found = [str(w.message) for w in caught] + health_warnings(results["trace_health"])
    plots = _write_plots(results, computed, out / "plots")
    from tokentrace.report_html import write_report_html
    report = write_report_html(out / "report.html", folder, merged.path, results, computed,
                               plots, list(dict.fromkeys(found)), skipped)
    clock.lap("write")
    for message in dict.fromkeys(found):
        warnings.warn(message, TokentraceWarning, stacklevel=2)
    return AnalyzeResult(out, report, merged.path, tables, plots, computed["summary"],
                         computed["top_stalls"], list(dict.fromkeys(found)), skipped, clock.laps)


class _Clock:
    def __init__(self):
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self._last, 3)
        self._last = now


def _run_report_queries(loaded, params: dict) -> tuple[dict, dict, list[str]]:
    """Runs every bundled report query present; returns rows, used parameters, skipped names."""
    from tokentrace.queries import effective_params, find_query, run_query

    bundled = {spec.name for spec in list_queries()}
    results, used, skipped = {}, {}, []
    for name in REPORT_QUERIES:
        if name not in bundled:
            skipped.append(name)
            continue
        spec = find_query(name)
        given = {k: v for k, v in params.items() if spec.param(k) is not None}
        results[name] = run_query(loaded, spec, given)
        used[name] = (spec, effective_params(spec, given))
    results["gpu_windows"] = loaded.query(GPU_WINDOW_SQL)
    results["loop_frames"] = loaded.query(LOOP_FRAMES_SQL.replace("${min_share}", "0.5"))
    return results, used, skipped


def compute_report_tables(results: dict[str, pd.DataFrame],
                          stall_min_ns: int = STALL_MIN_NS) -> dict[str, pd.DataFrame]:
    """The computed tables of the report from the query rows (``gpu_gaps`` and ``host_stalls``
    needed; ``step_breakdown`` optional): attributed gaps, summary, profile, top stalls."""
    windows = results["gpu_windows"]
    gaps = results.get("gpu_gaps", pd.DataFrame(columns=["rank", "gap_index", "ts", "dur",
                                                         "gap_class"]))
    stalls = results.get("host_stalls", pd.DataFrame())
    loops = results.get("loop_frames", pd.DataFrame(columns=["frame"]))
    attributed = attribute_gaps(gaps, gap_causes(stalls), frozenset(loops["frame"]),
                                stall_min_ns)
    origin = int(windows["first_ts"].min()) if len(windows) else 0
    return {"gap_attribution": attributed,
            "summary": rank_summary(windows, attributed, results.get("step_breakdown")),
            "stall_profile": stall_profile(attributed),
            "top_stalls": top_stalls(attributed, origin)}


def _write_query_tables(results, used, loaded, folder: Path) -> dict[str, Path]:
    from tokentrace.export import result_metadata, write_result

    written = {}
    for name, (spec, params) in used.items():
        meta = result_metadata(str(spec.path), params, loaded.trace_path,
                               f"{loaded.backend}: {loaded.description}")
        written[name] = write_result(results[name], folder / f"{name}.parquet", meta)
    return written


def _write_computed(computed: dict[str, pd.DataFrame], folder: Path) -> dict[str, Path]:
    from tokentrace.export import result_metadata, write_result

    meta = result_metadata("tokentrace.report", {}, None, "computed from the query tables")
    return {name: write_result(frame, folder / f"{name}.parquet", meta)
            for name, frame in computed.items()}


def _write_plots(results, computed, folder: Path) -> dict[str, Path]:
    from tokentrace import plots

    folder.mkdir(parents=True, exist_ok=True)
    figures = {"timeline": plots.plot_timeline(results["gpu_windows"],
                                               computed["gap_attribution"]),
               "stall_profile": plots.plot_stall_profile(computed["stall_profile"])}
    if "step_breakdown" in results:
        figures["step_breakdown"] = plots.plot_step_breakdown(results["step_breakdown"])
    if "rank_skew" in results:
        figures["rank_skew"] = plots.plot_rank_skew(results["rank_skew"])
    written = {}
    for name, figure in figures.items():
        written[name] = folder / f"{name}.png"
        figure.savefig(written[name], dpi=110)
    return written
