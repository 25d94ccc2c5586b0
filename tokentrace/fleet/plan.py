"""How a batch run computes its tables, decided once and as data: :func:`plan_run`.

A run that computes one batch of tables (``tokentrace analyze``, ``tokentrace diff``) is planned
before anything is merged or loaded, from the profile (:class:`~tokentrace.sources.profile.Profile`),
the batch and what the machine offers (:class:`Resources`). The plan (:class:`RunPlan`) says per
rank whether it is merged now or its cached merge is read, and which engines run which tables
where: in this process, in a pool of processes, or on a Dask cluster. The code that runs the
batch (:func:`tokentrace.notebook.open_for_batch`, :class:`~tokentrace.fleet.RankSet`,
:mod:`.execute`) reads its choices from the plan; ``tokentrace analyze --plan`` prints it
without running it.

The choices:

* **A cold folder** (no cached merge) with the local executor is *streamed*: each rank is merged
  and queried in one task, ``jobs`` ranks at a time, its trace loaded while the merge writes it
  when a fork is safe and the engine is the embedded one (:mod:`.execute`).
* **Otherwise** the merge (when cold) runs first, then each rank's merged file is queried: on
  Dask in one engine per rank; locally in this process when one engine per rank and one job or
  one rank, else in a pool of ``jobs`` processes (at most one per engine).
* **Two engines per rank** (:func:`~tokentrace.fleet.split.groups_for_sizes`) when ``jobs``
  leaves two per rank, the batch splits, and the second heaps fit in memory: the second engine
  is a forked copy of the loaded one in a streamed run (the shared modules built once), which
  parts its group once more (:func:`~tokentrace.fleet.split.split_again`), a process of its own
  otherwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

#: Where the tables are computed (:attr:`RunPlan.where`).
IN_PROCESS, POOL, DASK = "this process", "process pool", "dask"


@dataclasses.dataclass(frozen=True)
class Resources:
    """What the run may use, and what is there already: the inputs of :func:`plan_run`.

    Attributes:
        jobs: ranks (or engines) at once: processes, or the ranks merged at a time.
        executor: ``local``, ``dask`` or ``dask://HOST:PORT``.
        backend: the trace processor (``embedded``, ``native``, ``remote``).
        can_fork: whether a child may be forked now (no other thread alive).
        memory: usable memory in bytes (None: unknown).
        merged_bytes: per rank, its cached merged file's size; None when the profile has no
            cached merge (the run merges it).
        input_bytes: per rank, its inputs' size as the trace processor reads them (a gzip
            file's inflated size).
        keep_loaded: whether traces mapped in this process stay loaded between calls (no
            batch: a notebook's repeated queries), or one is loaded already: one engine per
            rank then.
    """

    jobs: int
    executor: str
    backend: str
    can_fork: bool
    memory: int | None
    merged_bytes: tuple[int, ...] | None
    input_bytes: tuple[int, ...]
    keep_loaded: bool = False


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """A batch run's plan (:func:`plan_run`).

    Attributes:
        ranks: the rank tags, in rank order.
        merge: whether the run merges the profile (no cached merge).
        streamed: whether each rank is queried in the task that merges it (:mod:`.execute`).
        follow_merge: in a streamed run, whether the load follows the file as the merge writes
            it (a fork of the merge, the embedded engine), else the finished file is loaded.
        where: :data:`IN_PROCESS`, :data:`POOL` or :data:`DASK`.
        workers: processes at once (merging and querying ranks, or querying them); 1 in process.
        groups: the batch in the groups each rank's engines compute, one group per engine.
        fork_engine: with two groups in a streamed run, whether the second engine is a forked
            copy of the loaded one (else both groups run in turn in one engine).
    """

    ranks: tuple[str, ...]
    merge: bool
    streamed: bool
    follow_merge: bool
    where: str
    workers: int
    groups: tuple[tuple, ...]
    fork_engine: bool = False

    def lines(self) -> list[str]:
        """The plan in words, a line per choice (``tokentrace analyze --plan``)."""
        how = ("merged now, each rank queried as it is merged" if self.streamed
               else "merged now, then queried" if self.merge else "cached merge reused")
        load = ("loaded while the merge writes it" if self.follow_merge
                else "loaded from its merged file")
        engines = (f"{len(self.groups)} engines per rank"
                   + (" (the second a forked copy of the loaded one)" if self.fork_engine else "")
                   if len(self.groups) > 1 else "one engine per rank")
        where = (self.where if self.where != POOL else f"{self.where} of {self.workers}")
        lines = [f"ranks: {len(self.ranks)} ({', '.join(self.ranks)})", f"merge: {how}",
                 f"load: {load}", f"queries: {engines}, in {where}"]
        lines += [f"  engine {index + 1}: {self._group_words(index, group)}"
                  for index, group in enumerate(self.groups)]
        return lines

    def _group_words(self, index: int, group: tuple) -> str:
        """A group's tables; the forked copy's in its two parts where it forks again
        (:func:`~tokentrace.fleet.split.split_again`, as :mod:`.execute` runs it)."""
        from tokentrace.fleet.split import split_again

        parts = split_again(group) if self.fork_engine and index == 0 else [group]
        words = " | ".join(", ".join(r.table for r in part) for part in parts)
        return words + (" (in two processes: the copy forks again once the modules both parts need "
                        "are built)" if len(parts) > 1 else "")


def plan_run(ranks: Sequence[str], requests: Sequence, resources: Resources) -> RunPlan:
    """The plan of a batch run over ``ranks`` (their tags, in rank order): see the module
    docstring. Pure: the same arguments give the same plan."""
    from tokentrace.fleet.split import groups_for_sizes

    jobs = max(1, resources.jobs)
    local = resources.executor == "local"
    merge = resources.merged_bytes is None
    streamed = merge and local
    one_at_a_time = jobs == 1 or len(ranks) == 1
    whole = [list(requests)]
    if not local or (not streamed and one_at_a_time and resources.keep_loaded):
        groups = whole
    else:
        sizes = resources.input_bytes if merge else resources.merged_bytes
        groups = groups_for_sizes(jobs, list(sizes), requests, resources.memory)
    follow = streamed and resources.can_fork and resources.backend == "embedded"
    if not local:
        where, workers = DASK, 0
    elif streamed:
        where, workers = (IN_PROCESS, 1) if one_at_a_time else (POOL, min(jobs, len(ranks)))
    elif len(groups) == 1 and one_at_a_time:
        where, workers = IN_PROCESS, 1
    else:
        where, workers = POOL, min(jobs, len(ranks) * len(groups))
    return RunPlan(tuple(ranks), merge, streamed, follow, where, workers,
                   tuple(tuple(g) for g in groups), streamed and len(groups) > 1 and resources.can_fork)


def batch_plan(profile, requests: Sequence, *, engine, jobs: int, executor: str, cache_dir=None,
               merge=None) -> RunPlan:
    """The plan of a batch run over ``profile`` (:class:`~tokentrace.sources.profile.Profile`):
    what the machine offers and what the merge cache holds, read now, given to
    :func:`plan_run`. The batch's parameters are checked first.

    Raises:
        QueryError: a bad parameter (nothing merged or loaded yet).
    """
    from tokentrace.engine.sizing import trace_input_bytes, usable_memory
    from tokentrace.fleet.batch import check_requests
    from tokentrace.merge.cache import cached_merge
    from tokentrace.runtime.processes import can_fork

    check_requests(requests)
    cached = cached_merge(profile, cache_dir, merge, combined=False)
    merged = (None if cached is None
              else tuple(trace_input_bytes(path) for _, path, _ in cached.ranks))
    inputs = tuple(rank_input_bytes(r) for r in profile.ranks)
    resources = Resources(jobs, executor, engine.backend, can_fork(), usable_memory(), merged, inputs)
    return plan_run([str(r.tag) for r in profile.ranks], requests, resources)


def rank_input_bytes(files) -> int:
    """A rank's inputs' size as the trace processor reads them (a gzip file's inflated size):
    its merged file's expected size (:class:`~tokentrace.sources.discover.RankFiles`)."""
    from tokentrace.engine.sizing import trace_input_bytes

    return sum(trace_input_bytes(p) for p in (files.viztracer, *files.gpu) if p is not None)
