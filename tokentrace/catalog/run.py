"""Running catalogue queries: parameters rendered into the call, the rank identity added after
``rank`` (:mod:`.identity`), rows typed as declared."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tokentrace.catalog.functions import inline_call
from tokentrace.catalog.headers import QuerySpec, find_query
from tokentrace.catalog.identity import IDENTITY_SQL, with_rank_identity
from tokentrace.catalog.params import render, resolve_values
from tokentrace.catalog.reduce import reduce_rows, split_sql
from tokentrace.errors import QueryError


def render_sql(spec: QuerySpec, given: dict[str, object] | None = None) -> str:
    """The query file with its call's arguments replaced by the validated values' literals:
    what a person would run (tokentrace runs a bundled function's body inline:
    :func:`render_parts`).

    Raises:
        QueryError: unknown, ill-typed or missing parameters.
    """
    literals = _literals(spec, given)
    map_sql, reduce_sql = split_sql(spec.sql)
    if spec.call is not None:
        map_sql = _with_call(map_sql, spec, literals)
    return f"{map_sql}\n-- @reduce\n{reduce_sql}" if reduce_sql else map_sql


def render_parts(spec: QuerySpec, given: dict[str, object] | None = None) -> tuple[str, str]:
    """``(map SQL, reduce SQL)`` as they run. The map: a bundled module's function is run
    inline, its body with the literals (:func:`~tokentrace.catalog.functions.inline_call`: the
    engine would prepare the body twice through a call); a function of the file itself through
    its call. Literals are rendered from the validated values, never from user text. The
    reduce as written (it takes no parameters).

    Raises:
        QueryError: as :func:`render_sql`.
    """
    literals = _literals(spec, given)
    map_sql, reduce_sql = split_sql(spec.sql)
    if spec.function is not None:
        return inline_call(spec.function, literals), reduce_sql
    if spec.call is not None:
        map_sql = _with_call(map_sql, spec, literals)
    return map_sql, reduce_sql


def _literals(spec: QuerySpec, given: dict[str, object] | None) -> dict[str, str]:
    """``{argument name: SQL literal}`` of the validated values (defaults for the rest)."""
    values = resolve_values(spec.name, spec.params, given or {})
    return {p.sql_name: render(p, values[p.name]) for p in spec.params}


def _with_call(map_sql: str, spec: QuerySpec, literals: dict[str, str]) -> str:
    arguments = ", ".join(literals[p.sql_name] for p in spec.params)
    return f"{map_sql[:spec.call.start]}SELECT * FROM {spec.call.function}({arguments})"


def run_query(engine, name_or_path: str | Path | QuerySpec,
              params: dict[str, object] | None = None) -> pd.DataFrame:
    """Runs a bundled or user query on a loaded trace; returns its rows.

    Args:
        engine: an open :class:`tokentrace.engine.Engine`.
        name_or_path: bundled name, path to a ``.sql`` file, or a :class:`QuerySpec`.
        params: parameter values (strings as given on the command line, or Python values).
    """
    spec = name_or_path if isinstance(name_or_path, QuerySpec) else find_query(name_or_path)
    map_sql, reduce_sql = render_parts(spec, params)
    rows = _map_rows(engine, spec, map_sql)
    if reduce_sql:
        rows = _reduce(spec, reduce_sql, rows)
    return apply_declared_types(rows, spec)


def run_map(engine, spec: QuerySpec, params: dict[str, object] | None = None) -> pd.DataFrame:
    """The rows of a query's map part on one loaded trace, with the rank identity: for a
    cross-rank query the per-rank rows its reduce takes (:mod:`.reduce`); for any other query
    its result."""
    map_sql, reduce_sql = render_parts(spec, params)
    rows = _map_rows(engine, spec, map_sql)
    return rows if reduce_sql else apply_declared_types(rows, spec)


def run_reduce(spec: QuerySpec, map_rows: pd.DataFrame, params: dict[str, object] | None = None
               ) -> pd.DataFrame:
    """A cross-rank query's result from the map rows of every rank, concatenated."""
    _, reduce_sql = render_parts(spec, params)
    return apply_declared_types(_reduce(spec, reduce_sql, map_rows), spec)


def _map_rows(engine, spec: QuerySpec, sql: str) -> pd.DataFrame:
    """The map SQL's rows; with ``rank``, the rank identity of the same engine after it."""
    rows = _query(engine, spec, sql)
    if "rank" not in rows.columns:
        return rows
    return with_rank_identity(rows, _query(engine, spec, IDENTITY_SQL))


def _reduce(spec: QuerySpec, reduce_sql: str, map_rows: pd.DataFrame) -> pd.DataFrame:
    """The reduce's rows; with ``rank``, the rank identity of the map rows after it."""
    return with_rank_identity(reduce_rows(spec.name, reduce_sql, map_rows), map_rows)


def _query(engine, spec: QuerySpec, sql: str) -> pd.DataFrame:
    try:
        return engine.query(sql)
    except QueryError as exc:
        raise QueryError(f"query {spec.name} ({spec.path}): {exc}") from None


def effective_params(spec: QuerySpec, given: dict | None = None) -> dict[str, object]:
    """The values a run uses, as a person reads them: defaults overlaid with ``given``,
    converted, under the parameters' names (durations ``*_us`` in µs, e.g. ``"2ms"`` -> 2000).
    This is what result files record (:func:`tokentrace.catalog.export.result_metadata`)."""
    return resolve_values(spec.name, spec.params, given or {})


# PerfettoSQL column types -> the pandas type of a column the trace left all NULL or mixed
_DECLARED_DTYPES = {"LONG": "Int64", "INT": "Int64", "BOOL": "Int64", "DURATION": "Int64",
                    "TIMESTAMP": "Int64", "ID": "Int64", "DOUBLE": "float64"}


def apply_declared_types(frame: pd.DataFrame, spec: QuerySpec) -> pd.DataFrame:
    """Gives all-NULL or mixed columns the type the function declares (LONG -> nullable Int64),
    so a column's type does not depend on whether this trace happened to fill it."""
    for column in spec.columns:
        dtype = _DECLARED_DTYPES.get(column.type.upper())
        if dtype and column.name in frame.columns and frame[column.name].dtype == object:
            try:
                frame[column.name] = frame[column.name].astype(dtype)
            except (TypeError, ValueError):
                pass  # the SQL returned something else than documented: keep it as it is
    return frame


def run_queries(engine, requests: list[tuple[str | Path | QuerySpec, dict]]
                ) -> dict[str, pd.DataFrame]:
    """Runs several queries over one loaded trace (loaded once); returns {name: rows}.

    Parameters are all validated before the first query runs, so a typo fails fast.
    """
    specs = [(r if isinstance(r, QuerySpec) else find_query(r), p or {}) for r, p in requests]
    for spec, params in specs:
        render_sql(spec, params)
    return {spec.name: run_query(engine, spec, params) for spec, params in specs}
