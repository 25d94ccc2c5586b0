"""``tokentrace analyze`` as one library call (:func:`analyze`): run the bundled queries, pick
rows, format. Every figure comes from SQL (``queries/*.sql``); nothing here computes an analysis.

* A gap's **cause** is its ``host_stalls`` row with ``frame_rank`` 1 (the Python frame with the
  most self time in the gap; C calls such as ``time.sleep`` count for their caller).
* A **stall** is a steady (not start-up), host-caused gap (``by_host``: ``host_late``, or
  ``no_link`` on a rank without launch flows) of at least ``stall_min_us``.
* A rank's **top stall cause** is the first row of ``host_stall_profile`` run with
  ``min_gap_us`` = the stall threshold and ``host_only``; its **shorter host gaps** are the same
  query with ``max_gap_us`` = the threshold. *Per step* divides by the rank's ``step_breakdown``
  rows.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from pathlib import Path

import pandas as pd

from tokentrace.errors import TokentraceWarning
from tokentrace.queries import list_queries

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


# -- the analyze pipeline ---------------------------------------------------------------------

# Every bundled query the report runs, in the order it runs them.
REPORT_QUERIES = ("trace_health", "kernel_summary", "gpu_windows", "gpu_gaps", "host_stalls",
                  "host_stall_profile", "launch_latency", "step_breakdown", "rank_skew",
                  "collective_skew")


@dataclasses.dataclass
class AnalyzeResult:
    """What :func:`analyze` wrote and found.

    Attributes:
        output: the output folder.
        report: ``report.html`` (self-contained: plots embedded).
        trace: the combined merged trace the queries ran on (open it in the Perfetto UI).
        tables: ``{name: parquet path}`` for every query run and picked table.
        plots: ``{name: png path}``.
        summary: :func:`rank_summary` rows (one per rank).
        top_stalls: :func:`top_stalls` rows.
        warnings: health, step and merge warnings, each once.
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
            stall_min_us: float = STALL_MIN_US, jobs: int = 1,
            engine: str = "embedded", **merge_options) -> AnalyzeResult:
    """Profile folder -> merged trace, every stall query (Parquet), plots (PNG), report.html.

    The merge is cached in ``<output>/merged/`` and reused while the inputs are unchanged.

    Args:
        folder: the profile folder (one VizTracer + Proton pair per rank).
        output: the folder to write (created).
        min_gap_us: shortest GPU idle interval reported as a gap.
        launch_overhead_us: gaps up to this long after an early launch are launch overhead.
        step_name: the slice name of one scheduler step (``step_breakdown``, ``rank_skew``).
        stall_min_us: steady host-caused gaps at least this long are stalls (the top cause).
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
              "step_name": step_name, "stall_min_us": stall_min_us}
    with open_trace(merged.path, engine, warn=False) as loaded:
        clock.lap("load")
        results, used, skipped = run_report_queries(loaded, params)
        clock.lap("queries")
        tables = _write_query_tables(results, used, loaded, out / "tables")
    computed = compute_report_tables(results, int(stall_min_us * 1000), step_name)
    tables.update(_write_computed(computed, out / "tables"))
    found = [str(w.message) for w in caught] + health_warnings(results["trace_health"])
    if "step_breakdown" in results and results["step_breakdown"].empty:
        found.append(step_warning(step_name))
    found = list(dict.fromkeys(found))
    plots = _write_plots(results, computed, out / "plots")
    from tokentrace.report_html import write_report_html
    report = write_report_html(out / "report.html", folder, merged.path, results, computed,
                               plots, found, skipped)
    clock.lap("write")
    for message in found:
        warnings.warn(message, TokentraceWarning, stacklevel=2)
    return AnalyzeResult(out, report, merged.path, tables, plots, computed["summary"],
                         computed["top_stalls"], found, skipped, clock.laps)


class _Clock:
    def __init__(self):
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self._last, 3)
        self._last = now


def run_report_queries(loaded, params: dict) -> tuple[dict, dict, list[str]]:
    """Runs every bundled report query present, plus ``host_stall_profile`` over stalls
    (``stall_causes``) and over shorter host gaps (``short_host_gaps``).

    Args:
        loaded: an open engine (or :class:`tokentrace.analysis.Analysis`'s ``engine``).
        params: ``min_gap_us``, ``launch_overhead_us``, ``step_name``, ``stall_min_us``.

    Returns:
        ``{name: rows}``, ``{name: (spec, effective params)}``, skipped query names.
    """
    from tokentrace.queries import effective_params, find_query, run_query

    bundled = {spec.name for spec in list_queries()}
    stall = f"{params['stall_min_us']}us"
    runs = [(name, name, {}) for name in REPORT_QUERIES]
    runs += [("stall_causes", "host_stall_profile", {"min_gap_us": stall, "host_only": True}),
             ("short_host_gaps", "host_stall_profile", {"max_gap_us": stall, "host_only": True})]
    results, used, skipped = {}, {}, []
    for table, name, extra in runs:
        if name not in bundled:
            skipped.append(name)
            continue
        spec = find_query(name)
        given = {k: v for k, v in params.items() if spec.param(k) is not None} | extra
        results[table] = run_query(loaded, spec, given)
        used[table] = (spec, effective_params(spec, given))
    return results, used, list(dict.fromkeys(skipped))


def compute_report_tables(results: dict[str, pd.DataFrame],
                          stall_min_ns: int = STALL_MIN_US * 1000,
                          step_name: str = "decode_step") -> dict[str, pd.DataFrame]:
    """The picked tables of the report from the query rows (:func:`run_report_queries`):
    ``gap_attribution``, ``summary``, ``top_stalls``."""
    windows = results["gpu_windows"]
    attributed = gap_attribution(results["gpu_gaps"], results["host_stalls"], stall_min_ns)
    origin = int(windows["first_ts"].min()) if len(windows) else 0
    return {"gap_attribution": attributed,
            "summary": rank_summary(windows, results["stall_causes"],
                                    results["short_host_gaps"], results.get("step_breakdown"),
                                    step_name),
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

    meta = result_metadata("tokentrace.report", {}, None, "rows picked from the query tables")
    return {name: write_result(frame, folder / f"{name}.parquet", meta)
            for name, frame in computed.items()}


def _write_plots(results, computed, folder: Path) -> dict[str, Path]:
    from tokentrace import plots

    folder.mkdir(parents=True, exist_ok=True)
    figures = {"timeline": plots.plot_timeline(results["gpu_windows"],
                                               computed["gap_attribution"]),
               "stall_profile": plots.plot_stall_profile(results["host_stall_profile"])}
    if "step_breakdown" in results:
        figures["step_breakdown"] = plots.plot_step_breakdown(results["step_breakdown"])
    if "rank_skew" in results:
        figures["rank_skew"] = plots.plot_rank_skew(results["rank_skew"])
    written = {}
    for name, figure in figures.items():
        written[name] = folder / f"{name}.png"
        figure.savefig(written[name], dpi=110)
    return written
