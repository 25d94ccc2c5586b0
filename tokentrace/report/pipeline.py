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

from tokentrace.catalog import list_queries
from tokentrace.errors import TokentraceWarning
from tokentrace.options import AnalyzeOptions
from tokentrace.report.tables import (
    STALL_MIN_US,
    gap_attribution,
    health_warnings,
    rank_summary,
    step_warning,
    top_stalls,
)

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


def analyze(folder: str | os.PathLike, output: str | os.PathLike,
            options: AnalyzeOptions | None = None) -> AnalyzeResult:
    """Profile folder -> merged trace, every stall query (Parquet), plots (PNG), report.html.

    The merge is cached in ``<output>/merged/`` and reused while the inputs are unchanged.

    Args:
        folder: the profile folder (one VizTracer + Proton pair per rank).
        output: the folder to write (created).
        options: merge, engine and query settings (:class:`~tokentrace.options.AnalyzeOptions`).

    Example::

        result = analyze("profiles/run2", "out/run2")
        print(result.summary[["rank", "top_function", "top_idle_ns"]])

    Raises:
        TokentraceError: bad inputs, merge, engine or query failures (see the message).
    """
    from tokentrace.catalog import open_trace
    from tokentrace.merge.cache import merged_folder

    options = options or AnalyzeOptions()
    min_gap_us = 100 if options.min_gap_us is None else options.min_gap_us
    launch_overhead_us = 10 if options.launch_overhead_us is None else options.launch_overhead_us
    stall_min_us = STALL_MIN_US if options.stall_min_us is None else options.stall_min_us
    step_name = options.step_name or "decode_step"
    out, clock = Path(output), _Clock()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TokentraceWarning)
        merged = merged_folder(folder, out / "merged", options.merge)
    clock.lap("merge")
    params = {"min_gap_us": min_gap_us, "launch_overhead_us": launch_overhead_us,
              "step_name": step_name, "stall_min_us": stall_min_us}
    with open_trace(merged.path, options.engine, warn=False) as loaded:
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
    from tokentrace.report.html import write_report_html
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
    from tokentrace.catalog import effective_params, find_query, run_query

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
