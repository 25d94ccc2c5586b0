"""A batch of tables to compute on each rank's trace: its entries (:class:`QueryRequest`,
:class:`RankStep`), how it runs on one loaded trace (the map, :func:`run_requests`) and how the ranks'
rows become one table (the reduce, :func:`reduce_maps`). :mod:`.execute` runs it where the plan
says; this module imports none of the code that schedules it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import pandas as pd

from tokentrace.catalog import find_query
from tokentrace.catalog.reduce import time_columns
from tokentrace.catalog.run import run_map, run_reduce
from tokentrace.fleet.ranks import RankTrace


@dataclasses.dataclass(frozen=True)
class QueryRequest:
    """One table to compute: a bundled query (or ``.sql`` path) with its parameters.

    Attributes:
        table: the result's name (a query may run twice with other parameters).
        query: the bundled query name or a ``.sql`` path.
        params: its parameters (the query's defaults for the rest).
    """

    table: str
    query: str
    params: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class RankStep:
    """A table computed on each loaded trace by ``function(engine, rows)``, where ``rows`` are
    the batch's tables named in ``needs``, as the queries returned them on that trace (before
    any shift onto the common axis). It runs after those queries, in their engine; its time
    columns (``ts``, ``*_ts``) are shifted like theirs.

    Attributes:
        table: the result's name.
        function: a module-level function (it pickles by name to the workers).
        needs: the tables of the batch it reads.
    """

    table: str
    function: Callable[..., pd.DataFrame]
    needs: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Rows:
    """A table each rank computed by other means (free SQL: :meth:`~tokentrace.fleet.RankSet.query`),
    put on the common axis and concatenated by :func:`reduce_maps` as a step's rows are."""

    table: str


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """A run that computes one batch of tables, known before anything is loaded
    (``tokentrace analyze``, ``tokentrace diff``), and how it is computed: nothing is kept
    loaded for later calls, so one rank with cores to spare splits the batch over two engines
    (:mod:`.split`), and a folder not merged yet has each rank loaded and queried while its
    merge writes it (:mod:`.execute`). Without a plan (``tokentrace.open``, a notebook) each
    rank's trace stays loaded in this process between calls, for quick repeated queries.

    Attributes:
        requests: the batch, as :meth:`~tokentrace.fleet.RankSet.run` takes it.
    """

    requests: tuple


def is_step(request) -> bool:
    """Whether a batch entry is a :class:`RankStep` (not a query)."""
    return isinstance(request, RankStep)


def run_requests(loaded, requests: Sequence) -> dict[str, pd.DataFrame]:
    """Every request's map rows on one loaded trace, unshifted: the queries in order, then the
    steps (each given the rows it needs)."""
    rows = {r.table: run_map(loaded, find_query(r.query), r.params) for r in requests if not is_step(r)}
    for step in (r for r in requests if is_step(r)):
        rows[step.table] = step.function(loaded, {name: rows[name] for name in step.needs})
    return {r.table: rows[r.table] for r in requests}


def check_requests(requests: Sequence) -> None:
    """Renders every query's SQL (a bad parameter fails before anything is loaded); a step's
    needs must be tables of the batch.

    Raises:
        QueryError: a bad parameter, or a step that needs a table the batch does not make.
    """
    from tokentrace.catalog import render_sql
    from tokentrace.errors import QueryError

    tables = {r.table for r in requests if not is_step(r)}
    for request in requests:
        if not is_step(request):
            render_sql(find_query(request.query), request.params)
        elif not set(request.needs) <= tables:
            raise QueryError(f"step {request.table}: needs {', '.join(request.needs)}, "
                             "which the batch does not compute")


def on_common_axis(maps: Sequence[dict[str, pd.DataFrame]], traces: Sequence[RankTrace]
                   ) -> list[dict[str, pd.DataFrame]]:
    """Each rank's rows (``maps``, in the order of ``traces``) with its shift added to every time
    column (``ts``, ``*_ts``; NULLs stay NULL): the one place rows leave a rank's own axis for
    the run's common one (:attr:`RankTrace.shift_ns`)."""
    placed = []
    for rows_by_table, trace in zip(maps, traces):
        if trace.shift_ns:
            for rows in rows_by_table.values():
                for column in time_columns(rows):
                    rows[column] = rows[column] + trace.shift_ns
        placed.append(rows_by_table)
    return placed


def concat_rows(parts: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The ranks' rows in one table, typed as one rank's query would type them: a text column
    that is all NULL on one rank (object there) keeps the text type of the ranks that have
    values (pandas would make the whole column object)."""
    rows = pd.concat(parts, ignore_index=True)
    for column in [c for c in rows.columns if rows[c].dtype == "object"]:
        typed = next((p[column].dtype for p in parts if p[column].dtype != "object"), None)
        if typed is not None:
            rows[column] = rows[column].astype(typed)
    return rows


def reduce_maps(maps: Sequence[dict[str, pd.DataFrame]], traces: Sequence[RankTrace],
                requests: Sequence[QueryRequest]) -> dict[str, pd.DataFrame]:
    """The tables from every rank's map rows (``maps``, on each rank's own axis, in the order of
    ``traces``): put on the common axis (:func:`on_common_axis`), concatenated in rank order,
    cross-rank queries reduced."""
    maps = on_common_axis(maps, traces)
    tables = {}
    for request in requests:
        spec = find_query(request.query) if isinstance(request, QueryRequest) else None
        parts = [m[request.table] for m in maps if not m[request.table].empty]
        rows = (concat_rows(parts) if parts
                else maps[0][request.table].iloc[0:0] if maps else pd.DataFrame())
        tables[request.table] = (run_reduce(spec, rows, request.params)
                                 if spec is not None and spec.is_cross_rank
                                 else rows.reset_index(drop=True))
    return tables
