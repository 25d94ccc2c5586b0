"""Running catalogue queries: parameters rendered into the SQL, rows typed as the header says."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tokentrace.catalog.headers import PLACEHOLDER, QuerySpec, find_query
from tokentrace.catalog.params import render, resolve_values
from tokentrace.catalog.reduce import reduce_rows, split_sql
from tokentrace.errors import QueryError


def render_sql(spec: QuerySpec, given: dict[str, object] | None = None) -> str:
    """The query's SQL with every ``${name}`` replaced by its validated literal (for display
    and checks; what runs comes from :func:`render_parts`).

    Raises:
        QueryError: unknown, ill-typed or missing parameters, or an undeclared placeholder.
    """
    return _substitute(spec.sql, _literals(spec, given))


def render_parts(spec: QuerySpec, given: dict[str, object] | None = None) -> tuple[str, str]:
    """``(map SQL, reduce SQL)`` with the parameters' literals substituted in each part.

    The SQL is split at its ``-- @reduce`` line *before* any value goes in: a value is a
    literal only, so a string holding a ``-- @reduce`` line (or any comment or SQL text) can
    never change how the query is split or run.

    Raises:
        QueryError: as :func:`render_sql`.
    """
    literals = _literals(spec, given)
    map_sql, reduce_sql = split_sql(spec.sql)
    return _substitute(map_sql, literals), _substitute(reduce_sql, literals)


def _literals(spec: QuerySpec, given: dict[str, object] | None) -> dict[str, str]:
    values = resolve_values(spec.name, spec.params, given or {})
    check_placeholders(spec)
    return {p.sql_name: render(p, values[p.name]) for p in spec.params}


def _substitute(sql: str, literals: dict[str, str]) -> str:
    # One pass: a literal containing '${...}' text is never expanded again.
    return PLACEHOLDER.sub(lambda m: literals[m.group(1)], sql)


def check_placeholders(spec: QuerySpec) -> None:
    """Checks that every ``${name}`` of the SQL is a declared parameter's placeholder.

    A duration ``x_us`` is ``${x_ns}`` in the SQL (it receives nanoseconds); ``${x_us}`` is
    refused so that no SQL compares microseconds with nanosecond columns.

    Raises:
        QueryError: a placeholder of a duration under its ``_us`` name, or an undeclared one.
    """
    used = set(PLACEHOLDER.findall(spec.sql))
    durations = {p.name: p.sql_name for p in spec.params if p.type == "DURATION_US"}
    wrong = sorted(used & set(durations))
    if wrong:
        fixes = ", ".join(f"${{{durations[n]}}} instead of ${{{n}}}" for n in wrong)
        raise QueryError(f"{spec.path}: use {fixes}: the SQL receives nanoseconds")
    undeclared = sorted(used - {p.sql_name for p in spec.params})
    if undeclared:
        raise QueryError(f"{spec.path}: placeholder(s) {', '.join(undeclared)} have no "
                         "'-- @param NAME TYPE DEFAULT  doc' line")


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
    rows = _query(engine, spec, map_sql)
    if reduce_sql:
        rows = reduce_rows(spec.name, reduce_sql, rows)
    return apply_declared_types(rows, spec)


def run_map(engine, spec: QuerySpec, params: dict[str, object] | None = None) -> pd.DataFrame:
    """The rows of a query's map part on one loaded trace: for a cross-rank query the per-rank
    rows its reduce takes (:mod:`.reduce`); for any other query its result."""
    map_sql, reduce_sql = render_parts(spec, params)
    rows = _query(engine, spec, map_sql)
    return rows if reduce_sql else apply_declared_types(rows, spec)


def run_reduce(spec: QuerySpec, map_rows: pd.DataFrame, params: dict[str, object] | None = None
               ) -> pd.DataFrame:
    """A cross-rank query's result from the map rows of every rank, concatenated."""
    _, reduce_sql = render_parts(spec, params)
    return apply_declared_types(reduce_rows(spec.name, reduce_sql, map_rows), spec)


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


_DECLARED_DTYPES = {"INT": "Int64", "FLOAT": "float64"}


def apply_declared_types(frame: pd.DataFrame, spec: QuerySpec) -> pd.DataFrame:
    """Gives all-NULL or mixed columns the type the header documents (INT -> nullable Int64),
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
