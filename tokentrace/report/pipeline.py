"""``tokentrace analyze`` as one library call (:func:`analyze`): open the folder through the
notebook facade (:class:`tokentrace.notebook.Analysis`), run the bundled queries, pick rows,
format. Every figure comes from SQL (``queries/*.sql``); nothing here computes an analysis.

* A gap's **cause**, its timeline label and whether it is a **stall** (a steady, host-caused
  gap of at least ``stall_min_us``) are columns of ``gap_causes``.
* A rank's **top stall cause**, its **shorter host gaps** and the **cost per step** are its
  ``rank_summary`` row, shown next to its ``gpu_windows`` row (active window, idle by class).
* The full profiles behind them are written too: ``host_stall_profile`` over the stalls
  (``stall_causes``) and over the shorter host gaps (``short_host_gaps``).
* The busy time by kind is ``gpu_busy``; the kernels with the most GPU time are the first
  ``kernel_summary`` rows of each rank, their names demangled and shortened for display
  (:mod:`tokentrace.report.kernel_names`).
* The annotated traces (``annotated/``): each queried trace with the ``gap_causes`` rows drawn
  in, from the run's rows and the stalls' host slices found in the same engine
  (:class:`~tokentrace.fleet.RankStep` :data:`ANNOTATION_TABLE`; :mod:`tokentrace.annotate.outputs`).

Query parameters the user leaves out take their query's default (its call's argument); no default lives here.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from pathlib import Path

import pandas as pd

from tokentrace.catalog import effective_params, find_query, list_queries
from tokentrace.errors import TokentraceWarning
from tokentrace.notebook import Analysis, open_for_batch
from tokentrace.options import AnalyzeOptions
from tokentrace.report.figures import write_plots
from tokentrace.report.tables import (
    by_idle,
    detail_ranks,
    health_summary,
    health_warnings,
    kernel_table,
    rank_table,
    step_warning,
    top_stalls,
)
from tokentrace.runtime.processes import collector_frozen
from tokentrace.sources.profile import Profile, find_profile

# Every bundled query the report runs, in the order it runs them.
REPORT_QUERIES = ("trace_health", "kernel_summary", "gpu_windows", "gpu_busy", "gpu_gaps", "host_stalls",
                  "gap_causes", "host_stall_profile", "rank_summary", "idle_budget", "launch_latency",
                  "step_breakdown", "rank_skew", "collective_skew", "collective_wait")
# The query whose header declares the stall threshold (stall_min_us) the report uses.
STALL_QUERY = "rank_summary"
# The rows behind the annotated traces, computed on each loaded trace after gap_causes.
ANNOTATION_TABLE = "annotation_support"


@dataclasses.dataclass
class AnalyzeResult:
    """What :func:`analyze` wrote and found.

    Attributes:
        output: the output folder.
        report: ``report.html`` (self-contained: plots embedded).
        trace: the trace the queries ran on (for a folder, the cache entry holding its per-rank
            merged traces: each rank is queried on its own, see :mod:`tokentrace.fleet`).
        tables: ``{name: parquet path}`` for every query run and picked table.
        plots: ``{name: svg path}``.
        summary: one row per rank (:func:`~tokentrace.report.tables.rank_table`).
        top_stalls: the longest gaps per rank (:func:`~tokentrace.report.tables.top_stalls`).
        warnings: health, step and merge warnings, each once.
        skipped: bundled queries this installation lacks (nothing written for them).
        seconds: wall time of each phase: ``merge`` then ``queries``, or for a folder not merged
            yet ``merge and queries`` (queried while merged) then ``reduce``; then ``write``
            and ``annotate`` (the annotated traces).
        health: the line saying what was checked when no health warning holds ('' otherwise).
        annotated: the annotated traces (``annotated/*.annotated.json``), one per rank (one
            for a merged trace given as it is).
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
    health: str = ""
    annotated: list[Path] = dataclasses.field(default_factory=list)


def analyze(folder: str | os.PathLike | Profile, output: str | os.PathLike,
            options: AnalyzeOptions | None = None, progress=None) -> AnalyzeResult:
    """Profile folder -> per-rank merged traces, every stall query (Parquet), plots (SVG),
    report.html.

    The merge is cached in the user cache (:mod:`tokentrace.merge.cache`: bounded, shared with
    ``tokentrace.open``, ``view`` and ``diff``; nothing is written into ``folder``, and ``output``
    holds the outputs only) and reused while the inputs are unchanged; each
    rank's trace is queried in its own process (``options.jobs`` at once, or on Dask with
    ``options.executor``), rows put on the run's common time axis, cross-rank queries reduced.

    Args:
        folder: the profile folder (one VizTracer + Proton pair per rank), the
            :class:`~tokentrace.sources.profile.Profile` found in it already, or one trace file.
        output: the folder to write (created).
        options: merge, engine and query settings (:class:`~tokentrace.options.AnalyzeOptions`;
            query values left None take the queries' defaults).
        progress: told of each stage and rank (:class:`Stages`; default: nothing).

    Example::

        result = analyze("profiles/run2", "out/run2")
        print(result.summary[["rank", "top_function", "top_idle_ns"]])

    Raises:
        TokentraceError: bad inputs, merge, engine or query failures (see the message).
    """
    options = options or AnalyzeOptions()
    out = Path(output)
    requests, used, skipped = report_requests(options.query_params())
    requests = with_annotation_step(requests)
    # The objects made so far (pandas, pyarrow and the engine's modules: ~10^5) are left out of
    # the cyclic collector's passes until the end: each full pass walked them all, to free none,
    # in this process and in every child forked from it, where writing the collector's marks
    # into them also copies every page they lie on (a fork shares pages until they are
    # written).
    with collector_frozen():  # a caller's garbage made before this call is collected again after it
        return _analyze(folder, out, options, requests, used, skipped, progress or Stages())


class Stages:
    """Where :func:`analyze` tells of its progress; this one ignores it (the command line
    shows it: :mod:`tokentrace.cli.progress`).

    ``stage(name, total)`` starts a stage (``total``: the ranks it goes through, or None);
    ``advance(label)`` says one of them is done."""

    def stage(self, name: str, total: int | None = None) -> None:
        pass

    def advance(self, label: str = "") -> None:
        pass


def _analyze(folder, out: Path, options: AnalyzeOptions, requests, used, skipped,
             progress: Stages) -> AnalyzeResult:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TokentraceWarning)
        # Perfetto's load problems reach the report as trace_health rows, not as warnings. A
        # folder not merged yet is queried while it is merged (the batch prefetched).
        profile = folder if isinstance(folder, Profile) else None
        folder = profile.source if profile is not None else Path(folder)
        if profile is None and folder.is_dir():
            profile = find_profile(folder, options.merge.profile_id)
        source = profile if profile is not None else _merged_file(folder, options)
        merge = options.merge if profile is not None else None
        trace = open_for_batch(source, requests, merge=merge, engine=options.engine,
                               jobs=options.query_jobs(), executor=options.executor,
                               progress=progress)
    clock = _Clock(trace.seconds)
    with trace:
        if not trace.queried_while_merged:
            progress.stage("queries", len(trace.ranks.traces))
        results = trace.run_many(requests)
        clock.lap("reduce" if trace.queried_while_merged else "queries")
        progress.stage("writing tables")
        support = results.pop(ANNOTATION_TABLE, None)
        tables = _write_query_tables(results, used, trace, out / "tables")
    computed = compute_report_tables(results)
    tables.update(_write_computed(computed, out / "tables"))
    detail = detail_ranks(computed["summary"], options.detail_ranks)
    found = ([str(w.message) for w in caught] + list(profile.warnings if profile is not None else ())
             + health_warnings(results["trace_health"]))
    if "step_breakdown" in results and results["step_breakdown"].empty:
        found.append(step_warning(used["step_breakdown"][1]["step_name"]))
    found = list(dict.fromkeys(found))
    progress.stage("writing the report")
    plots = write_plots(results, detail, out / "plots") if options.plots else {}
    from tokentrace.report.html import write_report_html
    report = write_report_html(out / "report.html", folder, trace.trace_path, results, computed,
                               plots, found, skipped, detail, annotated_paths(out, trace, support))
    clock.lap("write")
    if support is not None:
        progress.stage("writing the annotated traces")
    annotated = write_annotated(folder, out, trace, results, support, used)
    if annotated:
        clock.lap("annotate")
    for message in found:
        warnings.warn(message, TokentraceWarning, stacklevel=2)
    health = "" if found else health_summary(results.get("trace_health"))
    return AnalyzeResult(out, report, trace.trace_path, tables, plots, computed["summary"],
                         computed["top_stalls"], found, skipped, clock.laps, health, annotated)


def analyze_plan(folder: str | os.PathLike | Profile, options: AnalyzeOptions | None = None):
    """How :func:`analyze` would run on a profile folder, decided as it decides it and nothing
    run: the :class:`~tokentrace.fleet.plan.RunPlan` (``tokentrace analyze --plan``).

    Raises:
        InputError, DiscoveryError: not a profile folder. QueryError: a bad parameter.
    """
    from tokentrace.fleet.plan import batch_plan
    from tokentrace.notebook import batch_requests

    options = options or AnalyzeOptions()
    profile = folder if isinstance(folder, Profile) else find_profile(folder, options.merge.profile_id)
    requests, _, _ = report_requests(options.query_params())
    batch = batch_requests(with_annotation_step(requests))
    return batch_plan(profile, batch, engine=options.engine, jobs=options.query_jobs(),
                      executor=options.executor, merge=options.merge)


def with_annotation_step(requests: list) -> list:
    """The batch with the :class:`~tokentrace.fleet.RankStep` that finds, on each loaded trace,
    what its annotation needs besides the ``gap_causes`` rows (when the batch runs gap_causes)."""
    from tokentrace.annotate.gaps import annotation_support
    from tokentrace.fleet import RankStep

    if not any(table == "gap_causes" for table, _, _ in requests):
        return requests
    return [*requests, RankStep(ANNOTATION_TABLE, annotation_support, ("gap_causes",))]


def write_annotated(folder, out: Path, trace: Analysis, results: dict, support, used: dict) -> list[Path]:
    """Writes ``out/annotated/``: each trace the run queried, annotated from its ``gap_causes``
    rows (:func:`tokentrace.annotate.outputs.write_annotated_traces`); nothing without them."""
    if support is None or "gap_causes" not in results:
        return []
    from tokentrace.annotate.outputs import ANNOTATED_DIR, TraceToAnnotate, write_annotated_traces

    # (one trace file: all the rows' ranks)
    traces = [TraceToAnnotate(Path(t.path), t.shift_ns, () if t.rank is None else (t.rank,))
              for t in trace.ranks.traces]
    params = used["gap_causes"][1]
    written = write_annotated_traces(out / ANNOTATED_DIR, traces, results["gap_causes"], support,
                                     min_gap_us=params["min_gap_us"], stall_min_us=params["stall_min_us"],
                                     source=folder)
    return [r.path for r in written]


def annotated_paths(out: Path, trace: Analysis, support) -> list[Path]:
    """The annotated traces :func:`write_annotated` will write (none without their rows)."""
    from tokentrace.annotate.outputs import ANNOTATED_DIR, annotated_name

    if support is None:
        return []
    return [out / ANNOTATED_DIR / annotated_name(Path(t.path)) for t in trace.ranks.traces]


def _merged_file(trace: Path, options: AnalyzeOptions) -> Path:
    """One trace file to query: a merged trace as it is; a raw GPU trace (a torch-profiler
    trace alone, or a GPU trace with its host report beside it as merge pairs them) merged
    first through the merge cache (the user cache, as a folder is), so its ranks are tagged as
    a folder's are."""
    from tokentrace.merge.cache import merged_folder
    from tokentrace.sources.detect import TraceKind, sniff

    if sniff(trace) is TraceKind.MERGED:
        return trace
    merged = merged_folder(trace, None, options.merge, combined=False)
    return merged.ranks[0][1]


class _Clock:
    """Phase timings: the facade's ``merge`` and ``load``, then one lap per later phase."""

    def __init__(self, opened: dict[str, float]):
        self.laps: dict[str, float] = dict(opened)
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self._last, 3)
        self._last = now


def run_report_queries(trace: Analysis, params: dict | None = None
                       ) -> tuple[dict, dict, list[str]]:
    """Runs every bundled report query present through the facade, plus
    ``host_stall_profile`` over the stalls (``stall_causes``) and over the shorter host gaps
    (``short_host_gaps``).

    Args:
        trace: an open :class:`~tokentrace.notebook.Analysis`.
        params: query parameters set by the user (:meth:`AnalyzeOptions.query_params`), e.g.
            ``{"stall_min_us": 5000}``; each query gets those it declares, and its query's
            defaults for the rest.

    Returns:
        ``{name: rows}``, ``{name: (spec, effective params)}``, skipped query names.
    """
    requests, used, skipped = report_requests(params)
    # one batch: for a folder, each rank's trace is loaded once for every query
    return trace.run_many(requests), used, skipped


def report_requests(params: dict | None = None) -> tuple[list[tuple[str, str, dict]], dict, list[str]]:
    """The batch :func:`run_report_queries` runs: ``[(table, query, params), ...]``,
    ``{table: (spec, effective params)}`` and the bundled queries missing here."""
    given = dict(params or {})
    bundled = {spec.name for spec in list_queries()}
    # The user's threshold, else its query's default: the profiles take it as a gap bound.
    stall = effective_params(find_query(STALL_QUERY), _declared(STALL_QUERY, given))
    runs = [(name, name, {}) for name in REPORT_QUERIES]
    runs += [("stall_causes", "host_stall_profile",
              {"min_gap_us": stall["stall_min_us"], "host_only": True}),
             ("short_host_gaps", "host_stall_profile",
              {"max_gap_us": stall["stall_min_us"], "host_only": True})]
    requests, used, skipped = [], {}, []
    for table, name, extra in runs:
        if name not in bundled:
            skipped.append(name)
            continue
        spec = find_query(name)
        query_params = _declared(name, given) | extra
        requests.append((table, name, query_params))
        used[table] = (spec, effective_params(spec, query_params))
    return requests, used, list(dict.fromkeys(skipped))


def _declared(name: str, params: dict) -> dict:
    """The parameters of ``params`` that query ``name`` declares."""
    spec = find_query(name)
    return {k: v for k, v in params.items() if spec.param(k) is not None}


def compute_report_tables(results: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The picked tables of the report from the query rows (:func:`run_report_queries`):
    ``summary`` (one row per rank), ``top_stalls`` (the longest gaps per rank) and, with
    ``kernel_summary``, ``kernels`` (the kernels with the most GPU time per rank)."""
    computed = {"summary": by_idle(rank_table(results["gpu_windows"], results["rank_summary"],
                                              results.get("idle_budget"), results.get("collective_wait"),
                                              results.get("gpu_busy"))),
                "top_stalls": top_stalls(results["gap_causes"])}
    if "kernel_summary" in results:
        computed["kernels"] = kernel_table(results["kernel_summary"])
    return computed


def _write_query_tables(results, used, trace: Analysis, folder: Path) -> dict[str, Path]:
    from tokentrace.catalog.export import result_metadata, write_result

    engine = trace.description
    written = {}
    for name, (spec, params) in used.items():
        meta = result_metadata(str(spec.path), params, trace.trace_path, engine)
        written[name] = write_result(results[name], folder / f"{name}.parquet", meta)
    return written


def _write_computed(computed: dict[str, pd.DataFrame], folder: Path) -> dict[str, Path]:
    from tokentrace.catalog.export import result_metadata, write_result

    meta = result_metadata("tokentrace.report", {}, None, "rows picked from the query tables")
    return {name: write_result(frame, folder / f"{name}.parquet", meta)
            for name, frame in computed.items()}
