"""A profile folder not merged yet, queried as it is merged: ``tokentrace analyze``'s cold run.

In the plain order every rank is merged, then each rank's merged file is loaded and queried.
Here the queries ride on the merge (:func:`merge_and_query`: the profile's cache entry filled by
:class:`StreamedQueries`, one task per rank, as many at a time as the plan says; the merge knows
nothing of them):

* a forked child merges the rank (:func:`~tokentrace.merge.rank.merge_rank`, which forks its
  host copy in turn) and says which temp file it writes;
* this process loads that file while it grows (:class:`_MergeFollower`): Perfetto's JSON import,
  the slower of the two (it parses every event and builds its tables, where the merge copies
  most bytes as they are), starts with the first bytes instead of after the last;
* the rank's queries run on the loaded engine; with cores to spare (two groups, see
  :func:`~tokentrace.fleet.split.split_requests`), a forked copy of the loaded engine runs one
  group while this process runs the other: one load where two engines each loaded the file.

The rows come back on the rank's own time axis; :func:`prefill_batch` shifts them once every
rank's shift is known, and they are the rows of the plain order
(tests/fleet/test_streamed.py). Where a fork is not safe (another thread alive) or the engine
is not the embedded one, the rank is merged, then loaded (the same rows).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from tokentrace.catalog import open_trace
from tokentrace.engine import GrowingTrace
from tokentrace.errors import TokentraceError, detached
from tokentrace.fleet.batch import QueryRequest, reduce_maps, run_requests
from tokentrace.fleet.plan import RunPlan, rank_input_bytes
from tokentrace.fleet.split import shared_modules
from tokentrace.merge.cache import MergedTrace, filled_entry
from tokentrace.merge.pipeline import MERGE_WORKER_DIED, MergeResult, check_options, output_paths, rank_warnings
from tokentrace.merge.rank import merge_rank
from tokentrace.merge.rank_events import RankResult
from tokentrace.options import EngineOptions, MergeOptions
from tokentrace.runtime.each import run_each
from tokentrace.runtime.journal import journal
from tokentrace.runtime.processes import ForkedCall, can_fork
from tokentrace.sources.discover import RankFiles
from tokentrace.sources.profile import Profile

#: How long the load waits for the merge to write more before it looks again, seconds.
POLL_SECONDS = 0.005


@dataclasses.dataclass
class StreamedRank:
    """What merging and querying one rank gave (:class:`StreamedQueries`).

    Attributes:
        result: the merge's (:class:`~tokentrace.merge.rank_events.RankResult`).
        rows: the requests' rows (table -> rows, times on the rank's own axis); None after an
            error.
        error: why there are no rows (the load or a query failed: the merge itself succeeded,
            and its entry is kept), else None.
    """

    result: RankResult
    rows: dict | None = None
    error: Exception | None = None


@dataclasses.dataclass(frozen=True)
class StreamedQueries:
    """Merges one rank and runs ``groups``' requests on its file as it is written (see the
    module docstring): a :class:`StreamedRank`.

    Attributes:
        groups: the requests, in one group or two (:attr:`RunPlan.groups`).
        engine: the trace processor to load each rank into.
        follow: load the file as the merge writes it (:attr:`RunPlan.follow_merge`).
        fork_engine: run the second group in a forked copy of the loaded engine
            (:attr:`RunPlan.fork_engine`).

    Where the plan forks, a fork is checked to be safe again when it is made (no other thread
    alive then); where it is not, the rank is merged, then loaded, and its groups run in turn
    in one engine: the same rows.
    """

    groups: tuple[tuple[QueryRequest, ...], ...]
    engine: EngineOptions
    follow: bool = False
    fork_engine: bool = False

    @classmethod
    def from_plan(cls, plan: RunPlan, engine: EngineOptions) -> StreamedQueries:
        """The task of a streamed run's plan (:attr:`RunPlan.streamed`)."""
        return cls(plan.groups, engine, plan.follow_merge, plan.fork_engine)

    def __call__(self, files: RankFiles, output: Path, options: MergeOptions) -> StreamedRank:
        loaded = None
        if self.follow and can_fork():
            first = files.viztracer or files.gpu[0]
            with ForkedCall(lambda notify: merge_rank(files, output, options, on_open=lambda p: notify(str(p))),
                            f"{first}: merging the rank") as merging:
                try:
                    loaded = _load_growing(merging, self.engine, rank_input_bytes(files))
                except TokentraceError:
                    pass  # the merge's own error wins (raised next); else loaded again below
                result = merging.result()
        else:
            result = merge_rank(files, output, options)
        # Without a load that followed the merge, the finished file is loaded: a load that did
        # not need the temp file fails the same way again (its error is the one kept), one that
        # did (a wasm32 load out of memory, retried on memory64 after the rename) goes on.
        return self._query(result, (lambda: loaded) if loaded is not None
                           else (lambda: open_trace(output, self.engine, warn=False)))

    def _query(self, result: RankResult, opened) -> StreamedRank:
        """Runs the groups on the engine ``opened()`` gives; a load or query error is kept
        instead of the rows: the merge itself succeeded, and its entry is kept
        (:func:`prefill_batch` raises the error once it is written)."""
        try:
            with opened() as loaded:
                return StreamedRank(result, _run_groups(loaded, self.groups, result.output or Path(result.tag),
                                                        self.fork_engine))
        except TokentraceError as exc:
            return StreamedRank(result, error=detached(exc))  # it goes back pickled


def _load_growing(merging: ForkedCall, engine: EngineOptions, expected: int):
    """The rank's trace loaded from the temp file the merge writes, as it grows (the merge's
    error raised as soon as it fails); None when the merge named no file (a torch-profiler
    trace alone)."""
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


def _run_groups(loaded, groups, path: Path, fork: bool) -> dict[str, pd.DataFrame]:
    """Every request's map rows on ``loaded`` (unshifted). Two groups run in two processes when
    the plan forks and a fork is safe: the modules both need are built first, then a forked copy
    of the loaded engine runs the first group while this process runs the second (the wall of
    two engines that each built them, without building the shared modules twice)."""
    if len(groups) < 2 or not fork or not can_fork():
        return _rows(loaded, [r for group in groups for r in group])
    for module in shared_modules(groups):
        loaded.query(f"INCLUDE PERFETTO MODULE {module};")
    with ForkedCall(lambda notify: _rows(loaded, groups[0]), f"{path}: its queries") as child:
        second = _rows(loaded, groups[1])
        return child.result() | second


def _rows(loaded, requests) -> dict[str, pd.DataFrame]:
    return run_requests(loaded, requests)


def merge_and_query(profile: Profile, plan: RunPlan, engine: EngineOptions, cache_dir,
                    options: MergeOptions | None, progress=None) -> tuple[MergedTrace, list[StreamedRank]]:
    """A streamed run (:attr:`RunPlan.streamed`): the profile's cache entry filled by merging
    each rank and querying it as it is written (:class:`StreamedQueries`), as many ranks at a
    time as planned; the entry, and per rank what it gave (none when a complete entry was
    there already: nothing was merged).

    Raises:
        InputError, DiscoveryError, AlignmentError: a rank's merge failed (the lowest such rank's
            error; no entry is left).
    """
    task = StreamedQueries.from_plan(plan, engine)
    options = dataclasses.replace(options or MergeOptions(), combine=False, compress=False)
    check_options(options)
    ranks = list(profile.ranks)
    streamed: list[StreamedRank] = []

    def fill(entry: Path) -> MergeResult:
        per_rank, _ = output_paths(ranks, entry, False, False)
        with journal() as written:  # the files workers write, removed with the entry on failure
            for rank in ranks:
                written.track(per_rank[rank])
            streamed[:] = run_each(
                [(task, rank, per_rank[rank], options) for rank in ranks], plan.workers,
                MERGE_WORKER_DIED, (lambda index: progress(str(ranks[index].tag))) if progress else None)
        results = [s.result for s in streamed]
        return MergeResult(results, [per_rank[r] for r in ranks], None, rank_warnings(results))

    return filled_entry(profile, cache_dir, options, fill), streamed


def prefill_batch(traces, streamed: list[StreamedRank], requests) -> dict[str, pd.DataFrame]:
    """The batch's tables from the rows that rode on the merge (``streamed``, in the order of
    ``traces``), each rank's times shifted onto the common axis, reduced as
    :meth:`~tokentrace.fleet.RankSet.run` reduces them.

    Raises:
        TokentraceError: a rank's load or query failed (the lowest such rank's error; the merged
            entry is complete and stays).
    """
    for rank in streamed:  # in rank order: the lowest failing rank's error
        if rank.error is not None:
            raise rank.error
    return reduce_maps([rank.rows for rank in streamed], traces, requests)
