"""Cross-rank queries: a per-rank map in PerfettoSQL, a reduce over all ranks' map rows in SQLite.

A query comparing ranks (``rank_skew``, ``collective_skew``, ``collective_wait``,
``trace_health``) is written in two parts, split by a line ``-- @reduce``:

* the **map** (before it): PerfettoSQL run on a loaded trace, one row per rank and item (a step,
  a collective); it only looks at one rank at a time, so it gives the same rows on a combined
  trace as on each rank's own trace, once every time column is on the combined axis;
* the **reduce** (after it): plain SQLite over the table ``map`` (the map rows of every rank),
  run in Python's own :mod:`sqlite3`, where the ranks meet. When the map rows have ``rank``,
``ts`` and ``end_ts``, the view ``map_ranks_together`` lists the ranks compared: those whose
rows span time in common with another rank's, or the only rank (ranks recorded one after the
other never ran together: the k-th items of runs seconds apart are not the same work).

So the comparison has one home, and it runs the same way on one combined trace and on 64
per-rank traces analysed in parallel (:mod:`tokentrace.fleet`). Times in the map rows are ns;
the columns that hold a time on the trace axis are named ``ts`` or ``*_ts`` (never ``unix_ts``).

The reduce declares its result first, ``CREATE TEMP TABLE <query>_result(`` its columns, each
with its type and doc comment as the Perfetto standard library writes them ``);``, then its
SELECT. The runner runs both and refuses a SELECT whose columns are not the declared ones, in
order: what the catalogue documents (the query's columns) is what SQLite checked.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3

import pandas as pd

from tokentrace.catalog.functions import result_table
from tokentrace.errors import QueryError

REDUCE_MARKER = re.compile(r"^--\s*@reduce\s*$", re.M)
MAP_TABLE = "map"
# The ranks of ``map`` that ran at the same time as another (or the only rank): one definition
# for every reduce that compares ranks item by item.
_TOGETHER_VIEW = f"""
CREATE TEMP VIEW map_ranks_together AS
WITH _spans AS (
  SELECT rank, MIN(ts) AS first_ts, MAX(end_ts) AS last_ts FROM {MAP_TABLE} GROUP BY rank
)
SELECT a.rank FROM _spans AS a
WHERE (SELECT COUNT(*) FROM _spans) = 1
  OR EXISTS (SELECT 1 FROM _spans AS b
             WHERE b.rank != a.rank AND b.first_ts < a.last_ts AND a.first_ts < b.last_ts)
"""


def split_sql(sql: str) -> tuple[str, str]:
    """``(map SQL, reduce SQL)``; the reduce is ``""`` for a query without ``-- @reduce``."""
    parts = REDUCE_MARKER.split(sql)
    if len(parts) > 2:
        raise QueryError("a query has at most one '-- @reduce' line")
    return (parts[0], parts[1]) if len(parts) == 2 else (sql, "")


def time_columns(frame: pd.DataFrame) -> list[str]:
    """The columns of ``frame`` that hold a time on the trace axis: ``ts`` and ``*_ts``, not
    ``unix_ts`` (the same on every axis)."""
    return [c for c in frame.columns if (c == "ts" or c.endswith("_ts")) and c != "unix_ts"]


def reduce_rows(name: str, reduce_sql: str, map_rows: pd.DataFrame) -> pd.DataFrame:
    """Runs the reduce SQL over ``map_rows`` (as table ``map``) in an in-memory SQLite.

    A reduce that starts with ``CREATE TEMP TABLE <name>(columns);`` (its declared result, see
    :func:`~tokentrace.catalog.functions.result_table`) has that statement run first, and the
    SELECT after it must return the columns SQLite then lists for the table, in that order. The
    rows are the SELECT's, never stored in the table: SQLite would convert them by the declared
    types' affinity (``STRING`` is NUMERIC to it: the text '3.9' would become the number 3.9).

    Raises:
        QueryError: the reduce SQL fails, or returns other columns than it declares.
    """
    table = result_table(reduce_sql, f"query {name}")
    with contextlib.closing(sqlite3.connect(":memory:")) as connection:
        _load(connection, map_rows)
        try:
            if table is None:
                return pd.read_sql_query(reduce_sql, connection)
            connection.execute(table.declaration)
            declared = [row[0] for row in
                        connection.execute("SELECT name FROM pragma_table_info(?, 'temp')",
                                           (table.name,))]
            rows = pd.read_sql_query(table.select, connection)
        except (sqlite3.Error, pd.errors.DatabaseError) as exc:
            raise QueryError(f"query {name}: the reduce (SQLite) failed: {exc}") from None
    if list(rows.columns) != declared:
        raise QueryError(f"query {name}: the reduce returns the columns {_names(rows.columns)}, "
                         f"but its CREATE TEMP TABLE {table.name} declares {_names(declared)}: "
                         "its SELECT must return the declared columns, in that order")
    return rows


def _names(columns) -> str:
    return "(" + ", ".join(map(str, columns)) + ")"


def _load(connection: sqlite3.Connection, rows: pd.DataFrame) -> None:
    """Creates table ``map`` with the rows' columns (integers stay integers, NULLs NULL)."""
    frame = rows.astype(object).where(rows.notna(), None)
    columns = ", ".join(f'"{c}"' for c in frame.columns)
    connection.execute(f"CREATE TABLE {MAP_TABLE} ({columns})")
    if len(frame):
        marks = ", ".join("?" for _ in frame.columns)
        values = [tuple(_plain(v) for v in row) for row in frame.itertuples(index=False)]
        connection.executemany(f"INSERT INTO {MAP_TABLE} VALUES ({marks})", values)
    if {"rank", "ts", "end_ts"} <= set(frame.columns):
        connection.execute(_TOGETHER_VIEW)


def _plain(value):
    """numpy scalars -> Python ones (sqlite3 binds int, float, str, None)."""
    return value.item() if hasattr(value, "item") else value
