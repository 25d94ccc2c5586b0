"""The notebook facade: one object per trace, one method per bundled query, pandas out.

Example::

    import tokentrace

    with tokentrace.open("tests/data/sample_t39_tp2") as trace:   # merged once, then cached
        gaps = trace.gpu_gaps(min_gap_us=200)
        stalls = trace.host_stalls(top=3)
        trace.query("SELECT COUNT(*) AS n FROM slice")

A profile folder is merged on the fly, rank by rank, into the user cache (``~/.cache/tokentrace``
or ``$TOKENTRACE_CACHE_DIR``, bounded in bytes; nothing is written into the profile folder),
reused while the inputs are unchanged (see :mod:`tokentrace.merge.cache`); each rank's trace is then loaded in
its own trace processor and every query runs rank by rank, its rows put on the run's common time
axis and concatenated, cross-rank queries reduced over all ranks (:mod:`tokentrace.fleet`): no
combined file, however many ranks. A merged trace or a raw Proton/VizTracer trace is loaded as it
is. Every method returns a DataFrame with
the column types its query's function declares; times are integer nanoseconds.

Each query method takes its query's parameters as keywords; a parameter left out gets the
default in the query's call (``queries/<name>.sql``), which is the only place defaults
live. The methods' docstrings list them, read from the functions when this module is imported.
"""

from __future__ import annotations

import inspect
import os
import time
from pathlib import Path

import pandas as pd

from tokentrace.errors import InputError, QueryError
from tokentrace.options import EngineOptions, MergeOptions

__all__ = ["Analysis", "open_analysis"]


def _params_doc(name: str) -> str:
    """The ``Keyword Args`` section of a query method, from the query's function."""
    from tokentrace.catalog import find_query

    try:
        spec = find_query(name)
    except QueryError:  # an installation without this query: the method fails when called
        return f"\n\n``{name}.sql`` is not bundled in this installation."
    if not spec.params:
        return f"\n\n``{name}.sql`` takes no parameters."
    lines = [f"    {p.describe()}: {p.doc}" for p in spec.params]
    return (f"\n\nKeyword Args (defaults from the call in ``{name}.sql``):\n"
            + "\n".join(lines))


def _query_method(name: str, doc: str):
    """A method running the bundled query ``name`` with the keyword parameters given."""

    def method(self, **params) -> pd.DataFrame:
        return self.run(name, **params)

    method.__name__, method.__qualname__ = name, f"Analysis.{name}"
    method.__doc__ = inspect.cleandoc(doc) + _params_doc(name)
    return method


class Analysis:
    """The per-rank traces of a folder, or one trace file (a set of one), with one method per
    bundled query. Close it (or use ``with``).

    Attributes:
        trace_path: the file Perfetto loaded; for a folder, the cache entry of its per-rank files.
        trace_paths: every trace the queries run on (one per rank for a folder).
        source: what was opened (folder or file).
        ranks: the :class:`tokentrace.fleet.RankSet` the queries run on.
        merged: the cache entry when a folder was merged (``None`` otherwise).
        seconds: wall time of opening it: ``merge`` (0 when nothing was merged) and ``load``;
            ``merge and queries`` for a folder merged with its planned batch.
        plan: how a batch run is computed (:class:`~tokentrace.fleet.plan.RunPlan`; None when
            no batch was planned: :func:`open_analysis`).
        queried_while_merged: whether the planned batch was computed while the folder was
            merged (its first :meth:`run_many` returns those tables).
    """

    def __init__(self, ranks, source: Path, merged=None, seconds: dict[str, float] | None = None,
                 plan=None, queried_while_merged: bool = False):
        self.ranks = ranks
        self.source = source
        self.merged = merged
        self.plan = plan
        self.queried_while_merged = queried_while_merged
        self.trace_path = merged.folder if merged is not None else ranks.traces[0].path
        self.trace_paths = [t.path for t in ranks.traces]
        self.seconds = dict(seconds or {})

    @property
    def description(self) -> str:
        """The engine that runs the queries, in words (recorded in result files)."""
        return self.ranks.description

    # -- free SQL -----------------------------------------------------------------------------

    def query(self, sql: str) -> pd.DataFrame:
        """Runs PerfettoSQL (stdlib and ``tokentrace.*`` modules included with ``INCLUDE``); for
        a folder on every rank, rows concatenated with their ``rank``
        (:meth:`tokentrace.fleet.RankSet.query`).

        Example::

            trace.query("SELECT name, COUNT(*) AS n FROM slice GROUP BY name ORDER BY n DESC")
        """
        return self.ranks.query(sql)

    def run(self, name: str | os.PathLike, **params) -> pd.DataFrame:
        """Runs a bundled query by name (or a ``.sql`` file) with typed parameters; the ones
        left out get their query's default.

        Example::

            trace.run("gpu_gaps", min_gap_us=500, rank="TP1")

        Raises:
            QueryError: unknown query, bad parameter, or failing SQL.
        """
        return self.run_many([(str(name), str(name), params)])[str(name)]

    def run_many(self, requests) -> dict[str, pd.DataFrame]:
        """Runs several queries at once: ``[(table, query, params), ...]`` -> ``{table: rows}``;
        for a folder each rank's trace is loaded once for all of them. An entry may be a
        :class:`~tokentrace.fleet.RankStep` (computed on each loaded trace from the rows of
        the others).

        Raises:
            QueryError: a bad parameter (checked before anything runs) or a failing query.
        """
        return self.ranks.run(batch_requests(requests))

    # -- bundled queries ----------------------------------------------------------------------

    gpu_gaps = _query_method("gpu_gaps", """GPU idle intervals per rank with their class
        (:data:`tokentrace.gap_classes.GAP_CLASSES`), phase (``startup``/``steady``),
        ``by_host`` and the launch of the kernel that ended them.

        Example::

            trace.gpu_gaps(min_gap_us=1000).groupby("gap_class")["dur"].sum() / 1e6  # ms""")

    host_stalls = _query_method("host_stalls", """For each GPU gap, the host (VizTracer) frames
        that ran during it, ranked; the row with ``frame_rank`` 1 is the gap's cause.

        Example::

            causes = trace.host_stalls(top=1)   # the one frame behind each gap""")

    gap_causes = _query_method("gap_causes", """Each ``gpu_gaps`` row with its cause (the
        ``host_stalls`` frame_rank 1 row), its timeline label and ``is_stall`` (steady,
        host-caused, at least ``stall_min_us``).

        Example::

            gaps = trace.gap_causes()
            gaps[gaps.is_stall == 1][["rank", "dur", "cause_function"]]""")

    host_stall_profile = _query_method("host_stall_profile", """Host frames by the GPU idle
        time they own (self_ns), summed over the selected gaps, per rank; ``frame_rank`` 1 is
        the rank's top cause. Steady gaps only unless ``include_startup``; ``host_only`` keeps
        host-caused gaps; ``max_gap_us`` > 0 keeps gaps shorter than it.

        Example::

            stalls = trace.host_stall_profile(min_gap_us=2000, host_only=True)
            stalls[stalls.frame_rank == 1][["rank", "function", "self_ns", "gaps"]]""")

    rank_summary = _query_method("rank_summary", """Per rank: the top stall cause, the shorter
        host gaps, the steps and the top cause's cost per step (the figures `tokentrace
        analyze` prints).

        Example::

            trace.rank_summary()[["rank", "top_function", "top_idle_ns", "steps"]]""")

    launch_latency = _query_method("launch_latency", """Launch -> kernel start per kernel name
        (negative values mean bad alignment).""")

    step_breakdown = _query_method("step_breakdown", """Per scheduler step: wall time, GPU busy
        and idle by gap class.

        Example::

            trace.step_breakdown(step_name="scheduler_step").groupby("rank")["idle_ns"].mean()""")

    rank_skew = _query_method("rank_skew", """The same step on every rank: start/end skew and
        the slowest rank.""")

    collective_skew = _query_method("collective_skew", """Per collective kernel: how far apart
        the ranks arrived and ended.""")

    kernel_summary = _query_method("kernel_summary", """Per rank and kernel name: count,
        total/mean/min/max/median duration, GPU share.""")

    trace_health = _query_method("trace_health", """Per rank: Perfetto import problems, flow
        coverage, VizTracer overflow, alignment.""")

    gpu_windows = _query_method("gpu_windows", """Per rank: the GPU's active window (first
        kernel start, last kernel end), busy and idle time, and idle in gaps by class, phase
        and host-caused.

        Example::

            trace.gpu_windows()[["rank", "active_ns", "idle_share", "idle_host_steady_ns"]]""")

    # -- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        """Releases the trace processor(s) now (idempotent)."""
        self.ranks.close()

    def __enter__(self) -> Analysis:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<tokentrace.Analysis {self.trace_path} (from {self.source})>"


def batch_requests(requests) -> list:
    """``[(table, query, params), ...]`` as :class:`~tokentrace.fleet.QueryRequest` objects
    (a :class:`~tokentrace.fleet.RankStep` is kept as it is)."""
    from tokentrace.fleet import QueryRequest
    from tokentrace.fleet.batch import is_step

    return [r if is_step(r) else QueryRequest(r[0], str(r[1]), dict(r[2] or {})) for r in requests]


def open_analysis(path: str | os.PathLike, *, engine: str | EngineOptions = "embedded",
                  jobs: int = 1, executor: str = "local",
                  cache_dir: str | os.PathLike | None = None,
                  merge: MergeOptions | None = None, warn: bool = True) -> Analysis:
    """Opens a profile folder, a merged trace or a raw trace for analysis.

    Args:
        path: a profile folder (merged on the fly, cached), or one trace file.
        engine: ``"embedded"`` (default), ``"native"``, ``"remote"``, or an
            :class:`~tokentrace.options.EngineOptions` with the backend's settings.
        jobs: a folder's ranks queried at once (processes); 1 keeps every rank's trace loaded
            in this process between calls (quick repeated queries, memory of all ranks).
        executor: ``local``, ``dask`` (a local Dask cluster) or ``dask://HOST:PORT``.
        cache_dir: where a folder's merge is cached (default: ``merged/`` in the user cache,
            shared with ``tokentrace analyze``, ``view`` and ``diff``; never the folder).
        merge: how a folder is merged (:class:`~tokentrace.options.MergeOptions`).
        warn: emit a :class:`~tokentrace.errors.TokentraceWarning` for Perfetto's load errors
            (``tokentrace analyze`` turns the ``trace_health`` rows into its warnings instead).

    Example::

        with tokentrace.open("profiles/20260101-120000") as trace:
            print(trace.trace_health()[["rank", "align_method", "stats_errors"]])

    Raises:
        InputError: ``path`` does not exist. Merge and engine errors as raised there.
    """
    return _open(path, engine, jobs, executor, cache_dir, merge, warn, None)


def open_for_batch(path: str | os.PathLike, requests, *, engine: str | EngineOptions = "embedded",
                   jobs: int = 1, executor: str = "local",
                   cache_dir: str | os.PathLike | None = None,
                   merge: MergeOptions | None = None, progress=None) -> Analysis:
    """:func:`open_analysis` for a run that computes one batch of tables (``requests``, as
    :meth:`Analysis.run_many` takes them; parameters checked first), as ``tokentrace analyze``
    and ``tokentrace diff`` do (:class:`~tokentrace.fleet.batch.BatchPlan`): a folder not merged
    yet is queried while it is merged, with the local executor (each rank loaded as its merge
    writes it, ``jobs`` ranks at a time; the merge's own ``jobs`` is not used then), and the
    first :meth:`~Analysis.run_many` of that batch returns those tables; nothing is kept loaded.
    Perfetto's load problems come as ``trace_health`` rows, not as warnings. ``progress``
    (:class:`tokentrace.report.pipeline.Stages`' two methods) is told of the merge's ranks and
    of the queries' ranks."""
    from tokentrace.fleet.batch import BatchPlan

    return _open(path, engine, jobs, executor, cache_dir, merge, False,
                 BatchPlan(tuple(batch_requests(requests))), progress)


def _open(path, engine, jobs: int, executor: str, cache_dir, merge: MergeOptions | None,
          warn: bool, plan, progress=None) -> Analysis:
    from tokentrace.fleet import RankSet, RankTrace
    from tokentrace.sources.profile import Profile, find_profile

    source = path.source if isinstance(path, Profile) else Path(path).expanduser()
    if not source.exists():
        raise InputError(f"{source}: no such profile folder or trace file")
    engine_options = engine if isinstance(engine, EngineOptions) else EngineOptions(engine)
    started = time.perf_counter()
    if source.is_dir():
        profile = path if isinstance(path, Profile) else find_profile(source, (merge or MergeOptions()).profile_id)
        return _open_folder(profile, engine_options, jobs, executor, cache_dir, merge, plan, started,
                            progress)
    if merge is not None:
        raise InputError(f"{source}: merge options apply to a profile folder, not to one trace "
                         "file")
    ranks = RankSet([RankTrace(None, source)], engine_options,
                    progress=progress.advance if progress is not None else None)
    loading = time.perf_counter()
    if progress is not None:
        progress.stage("loading the trace")
    try:
        ranks.load(ranks.traces[0], warn=warn)
    except BaseException:
        ranks.close()
        raise
    seconds = {"merge": round(loading - started, 3),
               "load": round(time.perf_counter() - loading, 3)}
    return Analysis(ranks, source, None, seconds)


def _open_folder(profile, engine: EngineOptions, jobs: int, executor: str, cache_dir,
                 merge: MergeOptions | None, plan, started: float, progress=None) -> Analysis:
    from tokentrace.fleet import RankSet, cached_ranks
    from tokentrace.fleet.execute import execute
    from tokentrace.fleet.plan import batch_plan
    from tokentrace.merge.cache import merged_folder

    wanted = list(plan.requests) if plan is not None else None
    run = (batch_plan(profile, wanted, engine=engine, jobs=jobs, executor=executor, cache_dir=cache_dir,
                      merge=merge) if wanted is not None else None)
    tick = progress.advance if progress is not None else None
    streamed = run is not None and run.streamed  # each rank merged and queried in one task
    if progress is not None:  # (a reused merge ends this stage at once, unticked)
        progress.stage("merging and querying ranks" if streamed else "merging ranks", len(profile.ranks))
    if streamed:
        done = execute(run, wanted, engine, profile=profile, cache_dir=cache_dir, merge=merge, progress=tick)
        merged = done.merged
        ranks = RankSet(done.traces, engine, jobs, executor, plan=plan, progress=tick)
        ranks.prefill(wanted, done.tables)
    else:
        merged = merged_folder(profile, cache_dir, merge, combined=False, progress=tick)
        # the ranks' traces load when first queried (in the workers unless in process)
        ranks = RankSet(cached_ranks(merged), engine, jobs, executor, plan=plan, progress=tick)
    phase = "merge and queries" if streamed else "merge"
    return Analysis(ranks, profile.source, merged, {phase: round(time.perf_counter() - started, 3)},
                    run, streamed)
