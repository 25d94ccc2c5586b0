"""Running bundled queries over a set of per-rank traces: map per rank, then concatenate or reduce.

* **Map**: each rank's trace is loaded once and every requested query's map part runs on it
  (:func:`~tokentrace.fleet.execute.rank_rows`); a worker holds one rank's trace at a time. Rows get the rank's shift onto
  the common axis on every time column (``ts``, ``*_ts``).
* **Reduce**: per-rank queries' rows are concatenated in rank order; a cross-rank query's map
  rows are concatenated and its reduce runs over them (:func:`~tokentrace.catalog.run_reduce`).
* **Steps** (:class:`~tokentrace.fleet.batch.RankStep`): a table computed in Python on the loaded trace from the rows
  the batch's queries gave in the same engine (e.g. the host slices of the stalls that
  ``gap_causes`` found, for the annotated traces of ``tokentrace analyze``): no second load.
  Its rows are concatenated like a per-rank query's.

Executors: ``local`` (this process, ``jobs`` = 1, each rank's trace kept loaded between calls,
for notebooks; or a process pool of ``jobs`` workers, each loading one rank at a time) and
``dask`` (a Dask cluster: :mod:`.dask_executor`). All give the same tables, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from tokentrace.catalog import open_trace
from tokentrace.errors import EngineError
from tokentrace.fleet.batch import BatchPlan, QueryRequest, Rows, check_requests, reduce_maps
from tokentrace.fleet.execute import execute
from tokentrace.fleet.plan import Resources, RunPlan, plan_run
from tokentrace.fleet.ranks import RankTrace
from tokentrace.options import EngineOptions


def _query_rank(trace: RankTrace, sql: str, engine: EngineOptions) -> pd.DataFrame:
    with open_trace(trace.path, engine, warn=False) as loaded:
        return loaded.query(sql)


class RankSet:
    """The per-rank traces of one run, queried rank by rank; one trace file is a set of one.

    Args:
        traces: the ranks, in rank order (:func:`~tokentrace.fleet.rank_traces`).
        engine: the trace processor backend for every rank.
        jobs: ranks mapped at once (processes); 1 maps in this process.
        executor: ``local``, ``dask`` (a local Dask cluster) or ``dask://HOST:PORT``.
        progress: called with each rank's tag when its map is done.
        plan: the one batch the run computes (:class:`~tokentrace.fleet.batch.BatchPlan`), or
            None: ranks mapped in this process (``jobs`` 1, or one rank) keep their traces
            loaded between calls. With a plan nothing is kept, and one rank with ``jobs`` >= 2
            maps its batch in two engines (:mod:`.split`). Several ranks with ``jobs`` >= 2 x
            ranks are mapped in two engines each either way (their workers keep nothing loaded).
    """

    def __init__(self, traces: Sequence[RankTrace], engine: EngineOptions | None = None,
                 jobs: int = 1, executor: str = "local",
                 progress: Callable[[str], None] | None = None, plan: BatchPlan | None = None) -> None:
        self.traces = list(traces)
        self.engine = engine or EngineOptions()
        self.jobs, self.executor, self.progress = max(1, jobs), executor, progress
        self.plan = plan
        self._loaded: dict[str, object] = {}  # rank -> open engine (in-process mapping only)
        self._prefilled: tuple[list[QueryRequest], dict[str, pd.DataFrame]] | None = None
        self._closed = False

    @property
    def in_process(self) -> bool:
        """Whether free SQL (:meth:`query`) runs in this process, on traces kept loaded: the
        local executor with one job or one rank."""
        return self.executor == "local" and (self.jobs == 1 or len(self.traces) == 1)

    def plan_for(self, requests: Sequence[QueryRequest]) -> RunPlan:
        """How :meth:`run` maps ``requests`` over the merged traces
        (:func:`~tokentrace.fleet.plan.plan_run`): the traces' sizes, the jobs, the executor,
        and whether traces are kept loaded here (no batch plan: a notebook's repeated calls)."""
        from tokentrace.engine.sizing import trace_input_bytes, usable_memory
        from tokentrace.runtime.processes import can_fork

        sizes = tuple(trace_input_bytes(Path(t.path)) for t in self.traces)
        resources = Resources(self.jobs, self.executor, self.engine.backend, can_fork(),
                              usable_memory(), sizes, sizes,
                              keep_loaded=self.plan is None or bool(self._loaded))
        return plan_run([str(t.rank) for t in self.traces], list(requests), resources)

    @property
    def description(self) -> str:
        """The engine that runs the queries, in words (recorded in result files)."""
        if len(self.traces) == 1 and self.traces[0].rank is None and None in self._loaded:
            return f"{self.engine.backend}: {self._loaded[None].description}"
        where = ("in process" if self.executor == "local" and self.jobs == 1
                 else f"{self.executor}, jobs {self.jobs}")
        return f"{self.engine.backend}, per rank ({len(self.traces)} ranks, {where})"

    def query(self, sql: str) -> pd.DataFrame:
        """Free PerfettoSQL on every rank: the rows concatenated in rank order, each with its
        ``rank`` (added when the SQL has no such column) and times shifted like the bundled
        queries' (columns ``ts`` and ``*_ts``)."""
        self._check_open()
        frames = []
        for trace in self.traces:
            rows = self.load(trace).query(sql) if self.in_process else _query_rank(trace, sql, self.engine)
            if "rank" not in rows.columns and trace.rank is not None:
                rows.insert(0, "rank", trace.rank)
            frames.append({"rows": rows})
        return reduce_maps(frames, self.traces, [Rows("rows")])["rows"]

    def close(self) -> None:
        """Releases the traces kept loaded (idempotent)."""
        loaded, self._loaded, self._closed = self._loaded, {}, True
        for engine in loaded.values():
            engine.close()

    def _check_open(self) -> None:
        if self._closed:
            raise EngineError("this analysis was closed; open it again with tokentrace.open()")

    def load(self, trace: RankTrace, warn: bool = False):
        """The trace's engine, loaded in this process now unless it is loaded already, and kept
        loaded until :meth:`close`; ``warn`` emits Perfetto's load errors as warnings."""
        self._check_open()
        if trace.rank not in self._loaded:
            self._loaded[trace.rank] = open_trace(trace.path, self.engine, warn=warn)
        return self._loaded[trace.rank]

    def prefill(self, requests: Sequence[QueryRequest], tables: dict[str, pd.DataFrame]) -> None:
        """The tables of ``requests``, computed already (while the ranks were merged:
        :mod:`.execute`): the next :meth:`run` of the same requests returns them."""
        self._prefilled = (list(requests), tables)

    def run(self, requests: Sequence[QueryRequest]) -> dict[str, pd.DataFrame]:
        """Every request's table over all ranks (see the module docstring).

        Raises:
            QueryError: a parameter is bad (checked before any rank is loaded) or a query fails.
        """
        self._check_open()
        prefilled, self._prefilled = self._prefilled, None
        if prefilled is not None and prefilled[0] == list(requests):
            return prefilled[1]
        check_requests(requests)  # fail fast, before loading anything
        return execute(self.plan_for(requests), list(requests), self.engine, traces=self.traces,
                       executor=self.executor, progress=self.progress, loaded=self.load).tables

    def map_groups(self, requests: Sequence[QueryRequest]) -> list[list[QueryRequest]]:
        """The groups :meth:`run` maps each rank's ``requests`` in, one engine per group
        (:meth:`plan_for`)."""
        return [list(group) for group in self.plan_for(requests).groups]
