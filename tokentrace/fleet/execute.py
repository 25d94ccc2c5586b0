"""A planned batch run carried out: :func:`execute`, the one place a batch's ranks are merged,
loaded, forked and mapped, and their rows put on the common axis and reduced.

Each rank's share is one call of :func:`rank_rows` (a :class:`RankWork`), wherever it runs: in
this process, in a worker of the pool (:func:`~tokentrace.runtime.each.run_each`), or on a Dask
worker (:func:`map_rank`). What the plan (:class:`~tokentrace.fleet.plan.RunPlan`) chose is in
the work, and :func:`rank_rows` branches on it:

* **merge now** (a streamed run, :attr:`RunPlan.streamed`): the rank is merged into its file in
  the profile's cache entry first. Where the plan follows the merge
  (:attr:`RunPlan.follow_merge`), a forked child merges it and says which temp file it writes,
  and this process loads that file while it grows (:class:`_MergeFollower`): Perfetto's JSON
  import, the slower of the two (it parses every event and builds its tables, where the merge
  copies most bytes as they are), starts with the first bytes instead of after the last.
  Otherwise (a fork not safe now: another thread alive) the finished file is loaded.
* **load**: the rank's merged file, unless this process keeps it loaded already (a notebook's
  repeated queries: :class:`~tokentrace.fleet.RankSet`).
* **groups**: the batch in one engine, or in two (:mod:`.split`). With two in one work, the
  modules both need are built first and a forked copy of the loaded engine runs one group
  while this process runs the other (:attr:`RunPlan.fork_engine`); the copy splits its group
  once more the same way (:func:`~tokentrace.fleet.split.split_again`). A pool runs two groups
  of a merged rank as two works instead, each loading the file.

The rows come back on each rank's own time axis; :func:`execute` shifts and reduces them once
(:func:`~tokentrace.fleet.batch.reduce_maps`), so every way of running a batch gives the same
tables (tests/fleet/test_streamed.py, test_split.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from tokentrace.catalog import open_trace
from tokentrace.engine import GrowingTrace
from tokentrace.errors import TokentraceError, detached
from tokentrace.fleet.batch import reduce_maps, run_requests
from tokentrace.fleet.plan import DASK, IN_PROCESS, RunPlan, rank_input_bytes
from tokentrace.fleet.ranks import RankTrace, cached_ranks
from tokentrace.fleet.split import shared_modules, split_again
from tokentrace.merge.cache import MergedTrace, filled_entry
from tokentrace.merge.pipeline import MERGE_WORKER_DIED, MergeResult, check_options, output_paths, rank_warnings
from tokentrace.merge.rank import merge_rank
from tokentrace.merge.rank_events import RankResult
from tokentrace.options import EngineOptions, MergeOptions
from tokentrace.runtime.each import run_each
from tokentrace.runtime.journal import journal
from tokentrace.runtime.processes import ForkedCall, can_fork
from tokentrace.sources.discover import RankFiles

#: How long the load waits for the merge to write more before it looks again, seconds.
POLL_SECONDS = 0.005
QUERY_WORKER_DIED = ("a query worker process died (killed, or out of memory?); run again, with -j 1 "
                     "to query one rank at a time")


@dataclasses.dataclass(frozen=True)
class RankWork:
    """One rank's share of a planned run (:func:`rank_rows`); it pickles to a worker.

    Attributes:
        path: the rank's merged file (written by this work when ``files`` is set).
        groups: the requests, one group per engine (:attr:`RunPlan.groups`, or one of them).
        engine: the trace processor to load the rank into.
        files: the rank's inputs, merged into ``path`` first (a streamed run), else None.
        options: the merge's options (with ``files``).
        follow: load the file as the merge writes it (:attr:`RunPlan.follow_merge`).
        fork_engine: run the first of two groups in a forked copy of the loaded engine
            (:attr:`RunPlan.fork_engine`).
    """

    path: Path
    groups: tuple[tuple, ...]
    engine: EngineOptions
    files: RankFiles | None = None
    options: MergeOptions | None = None
    follow: bool = False
    fork_engine: bool = False


@dataclasses.dataclass
class RankRows:
    """What one rank's work gave (:func:`rank_rows`).

    Attributes:
        rows: table -> rows, on the rank's own time axis; None after an error.
        error: why there are no rows (its load or a query failed), else None. A merge's own
            error is raised, not kept: nothing of the entry is kept then.
        result: the merge's, when the work merged the rank.
    """

    rows: dict[str, pd.DataFrame] | None = None
    error: Exception | None = None
    result: RankResult | None = None

    def value(self) -> dict[str, pd.DataFrame]:
        """The rows, or the error raised."""
        if self.error is not None:
            raise self.error
        return self.rows


def rank_rows(work: RankWork, loaded=None) -> RankRows:
    """One rank's share of the run: merged when the work says so, loaded (unless ``loaded``, an
    engine this process keeps, is given), each group's requests run (see the module docstring).
    A load or query error is kept in the result, detached (it may go back pickled): a merge
    that succeeded keeps its entry."""
    result, growing = None, None
    if work.files is not None:
        result, growing = _merge(work)
    try:
        if loaded is not None:
            return RankRows(_run_groups(loaded, work), result=result)
        # Without a load that followed the merge, the finished file is loaded: a load that did
        # not need the temp file fails the same way again (its error is the one kept), one that
        # did (a wasm32 load out of memory, retried on memory64 after the rename) goes on.
        with growing if growing is not None else open_trace(work.path, work.engine, warn=False) as engine:
            return RankRows(_run_groups(engine, work, release=engine.close), result=result)
    except TokentraceError as exc:
        return RankRows(error=detached(exc), result=result)


def map_rank(trace: RankTrace, requests: Sequence, engine: EngineOptions) -> dict[str, pd.DataFrame]:
    """One merged rank's map rows for ``requests`` in one engine (a Dask task); its load or
    query error raised, detached."""
    return rank_rows(RankWork(trace.path, (tuple(requests),), engine)).value()


def _merge(work: RankWork):
    """The rank merged into ``work.path``: its result, and its trace loaded as the merge wrote
    it (None when the load did not follow the merge, or failed: loaded again after it)."""
    if not (work.follow and can_fork()):
        return merge_rank(work.files, work.path, work.options), None
    first = work.files.viztracer or work.files.gpu[0]
    files, path, options = work.files, work.path, work.options
    with ForkedCall(lambda notify: merge_rank(files, path, options, on_open=lambda p: notify(str(p))),
                    f"{first}: merging the rank") as merging:
        loaded = None
        try:
            loaded = _load_growing(merging, work.engine, rank_input_bytes(work.files))
        except TokentraceError:
            pass  # the merge's own error wins (raised next); else loaded again after it
        return merging.result(), loaded


def _load_growing(merging: ForkedCall, engine: EngineOptions, expected: int):
    """The rank's trace loaded from the temp file the merge writes, as it grows (the merge's
    error raised as soon as it fails); None when the merge ended without naming its file (it
    failed before opening it)."""
    temp = merging.line()
    if temp is None:
        return None
    return open_trace(GrowingTrace(Path(temp), _MergeFollower(merging), expected), engine, warn=False)


class _MergeFollower:
    """The merge child as a :class:`~tokentrace.engine.base.GrowingFile`: done once it has sent
    its result (its file then complete and renamed); its error raised at once."""

    def __init__(self, merging: ForkedCall) -> None:
        self._merging = merging

    def wait(self) -> bool:
        if self._merging.finished(POLL_SECONDS):
            self._merging.result()  # raises the merge's error
            return False
        return True


def _run_groups(loaded, work: RankWork, release: Callable[[], None] | None = None) -> dict[str, pd.DataFrame]:
    """Every request's rows on ``loaded``, unshifted. Two groups run in two processes when the
    work forks and a fork is safe now: the modules both need are built first, then a forked copy
    of the loaded engine runs the first group while this process runs the second (the wall of
    two engines that each built them, without building the shared modules twice). ``release``
    (given where this process owns the engine and needs it no more) frees it once this process's
    group is done, while the copy still runs: the pages this process wrote since the fork are
    freed then, not at the copy's end (the copy's group takes the longer)."""
    groups = work.groups
    if len(groups) < 2 or not work.fork_engine or not can_fork():
        return run_requests(loaded, [r for group in groups for r in group])
    return _run_forked(loaded, groups, f"{work.path}: its queries", release)


def _run_forked(loaded, groups: Sequence[Sequence], what: str, release: Callable[[], None] | None = None,
                again: bool = True) -> dict[str, pd.DataFrame]:
    """The two groups' rows: the modules both need built, then the first group in a forked copy
    of ``loaded`` (split once more there with ``again``: :func:`_run_copy`) while this process
    runs the second (``release``: see :func:`_run_groups`)."""
    for module in shared_modules(groups):
        loaded.query(f"INCLUDE PERFETTO MODULE {module};")
    first = groups[0]
    with ForkedCall(lambda notify: _run_copy(loaded, first, what) if again else run_requests(loaded, first),
                    what) as child:
        second = run_requests(loaded, groups[1])
        if release is not None:
            release()
        return child.result() | second


def _run_copy(loaded, requests: Sequence, what: str) -> dict[str, pd.DataFrame]:
    """The first group's rows, in the forked copy. Its queries all need a last module of the
    chain (``causes``, ``steps``), and the other process's group ends first: where they part
    again (:func:`~tokentrace.fleet.split.split_again`), the modules both parts need are built
    here and a copy of this copy runs one part, so that the core the other group frees works
    on this one's. Once: two parts are all two cores take."""
    parts = split_again(requests)
    if len(parts) < 2 or not can_fork():
        return run_requests(loaded, requests)
    return _run_forked(loaded, parts, what, again=False)


@dataclasses.dataclass
class Executed:
    """A batch run's outcome (:func:`execute`).

    Attributes:
        tables: table -> rows over every rank, on the common axis.
        traces: the ranks' merged traces, in rank order.
        merged: the profile's cache entry, when the run merged it (a streamed run).
    """

    tables: dict[str, pd.DataFrame]
    traces: list[RankTrace]
    merged: MergedTrace | None = None


def execute(plan: RunPlan, requests: Sequence, engine: EngineOptions, *,
            traces: Sequence[RankTrace] = (), profile=None, cache_dir=None,
            merge: MergeOptions | None = None, executor: str = "local",
            progress: Callable[[str], None] | None = None,
            loaded: Callable[[RankTrace], object] | None = None) -> Executed:
    """Runs ``plan``: a streamed run merges ``profile`` (into its cache entry under
    ``cache_dir``, with ``merge``'s options) and queries each rank in the task that merges it;
    otherwise the merged ``traces`` are mapped where the plan says (``loaded`` gives the engine
    this process keeps for a trace, when mapped here). Then the rows are shifted and reduced.
    ``progress`` is told each rank's tag once its work is done.

    Raises:
        InputError, DiscoveryError, AlignmentError: a rank's merge failed (the lowest such
            rank's error; no entry is left).
        TokentraceError: a rank's load or query failed (the lowest such rank's error; a merged
            entry is complete and stays).
    """
    merged = None
    if plan.streamed:
        merged, rows = _streamed(plan, requests, profile, engine, cache_dir, merge, progress)
        traces = cached_ranks(merged)
    else:
        traces = list(traces)
        rows = _mapped(plan, traces, requests, engine, executor, progress, loaded)
    return Executed(reduce_maps(rows, traces, requests), traces, merged)


def _streamed(plan: RunPlan, requests: Sequence, profile, engine: EngineOptions, cache_dir,
              options: MergeOptions | None, progress) -> tuple[MergedTrace, list[dict]]:
    """The profile's cache entry filled by merging each rank and querying it as it is written,
    as many ranks at a time as planned; the entry and each rank's rows (mapped from the entry's
    files when a complete entry was there already)."""
    options = dataclasses.replace(options or MergeOptions(), combine=False, compress=False)
    check_options(options)
    ranks = list(profile.ranks)
    done: list[RankRows] = []

    def fill(entry: Path) -> MergeResult:
        per_rank, _ = output_paths(ranks, entry, False, False)
        works = [RankWork(per_rank[r], plan.groups, engine, r, options, plan.follow_merge, plan.fork_engine)
                 for r in ranks]
        with journal() as written:  # the files workers write, removed with the entry on failure
            for rank in ranks:
                written.track(per_rank[rank])
            done[:] = run_each([(rank_rows, w) for w in works], plan.workers, MERGE_WORKER_DIED,
                               (lambda index: progress(str(ranks[index].tag))) if progress else None)
        results = [d.result for d in done]
        return MergeResult(results, [per_rank[r] for r in ranks], None, rank_warnings(results))

    merged = filled_entry(profile, cache_dir, options, fill)
    if not done:  # a complete entry was there already (written meanwhile): nothing was merged
        return merged, _mapped(plan, cached_ranks(merged), requests, engine, "local", progress, None)
    return merged, [d.value() for d in done]  # in rank order: the lowest failing rank's error


def _mapped(plan: RunPlan, traces: list[RankTrace], requests: Sequence, engine: EngineOptions,
            executor: str, progress, loaded) -> list[dict]:
    """Each merged rank's rows, in rank order, computed where the plan says."""
    if plan.where == DASK:
        from tokentrace.fleet.dask_executor import map_on_dask

        return map_on_dask(traces, requests, engine, executor, progress)
    if plan.where == IN_PROCESS:
        found = []
        for trace in traces:
            here = loaded(trace) if loaded is not None else None
            found.append(rank_rows(RankWork(trace.path, (tuple(requests),), engine), here).value())
            if progress:
                progress(trace.rank)
        return found
    groups = plan.groups
    left = [len(groups)] * len(traces)  # each rank's engines still mapping

    def finished(index: int) -> None:
        rank = index // len(groups)
        left[rank] -= 1
        if left[rank] == 0 and progress:
            progress(traces[rank].rank)

    works = [RankWork(t.path, (group,), engine) for t in traces for group in groups]
    flat = run_each([(rank_rows, w) for w in works], plan.workers, QUERY_WORKER_DIED, finished)
    per_rank = [flat[i:i + len(groups)] for i in range(0, len(flat), len(groups))]
    return [_in_order(requests, [part.value() for part in parts]) for parts in per_rank]


def _in_order(requests: Sequence, parts: list[dict[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """One rank's tables from the maps of its request groups, in the order of ``requests``."""
    found = {name: rows for part in parts for name, rows in part.items()}
    return {r.table: found[r.table] for r in requests}
