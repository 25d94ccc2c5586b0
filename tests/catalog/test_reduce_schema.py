"""A cross-rank query's reduce declares its result in SQL that runs (``CREATE TEMP TABLE
<query>_result(...)``), and the runner refuses a SELECT that returns other columns."""

from __future__ import annotations

import sqlite3

import pandas as pd
import pytest

from tokentrace.catalog import list_queries, load_spec, run_query
from tokentrace.catalog.functions import result_table
from tokentrace.catalog.reduce import reduce_rows, split_sql
from tokentrace.catalog.run import render_parts, run_map
from tokentrace.errors import QueryError

MAP = pd.DataFrame({"rank": ["TP0", "TP1"], "x": [1, 2]})


def _declared_by_sqlite(table) -> list[tuple[str, str]]:
    """``(name, type)`` of the declared table's columns as SQLite lists them once it ran."""
    connection = sqlite3.connect(":memory:")
    try:
        connection.execute(table.declaration)
        return list(connection.execute("SELECT name, type FROM pragma_table_info(?, 'temp')",
                                       (table.name,)))
    finally:
        connection.close()


def test_cross_rank_queries_return_their_declared_columns(merged_t39):
    # Both ranks of sample_t39_tp2 in one trace: every cross-rank query's reduce meets two ranks.
    _, engine = merged_t39
    specs = [spec for spec in list_queries() if spec.is_cross_rank]
    assert {s.name for s in specs} == {"rank_skew", "collective_skew", "collective_wait",
                                       "trace_health"}
    for spec in specs:
        table = result_table(render_parts(spec)[1], spec.name)
        assert table is not None and table.name == f"{spec.name}_result", spec.name
        declared = [(c.name, c.type) for c in table.columns]
        # what the catalogue documents is what SQLite ran
        assert declared == _declared_by_sqlite(table), spec.name
        reduced = reduce_rows(spec.name, render_parts(spec)[1], run_map(engine, spec))
        assert list(reduced.columns) == [name for name, _ in declared], spec.name
        assert len(reduced) > 0, spec.name
        # the result, rank identity added after `rank`, has the columns the query documents
        result = run_query(engine, spec)
        assert list(result.columns) == [c.name for c in spec.columns], spec.name
        assert all(c.doc for c in spec.columns), spec.name


@pytest.mark.parametrize("select, returned", [
    ("SELECT rank AS b, x AS a FROM map", "(b, a)"),                   # order
    ("SELECT x AS a FROM map", "(a)"),                                 # one missing
    ("SELECT x AS a, rank AS b, 1 AS c FROM map", "(a, b, c)"),        # one more
    ("SELECT x AS a, rank AS bb FROM map", "(a, bb)"),                 # renamed
])
def test_a_reduce_returning_other_columns_is_refused(select, returned):
    reduce_sql = f"CREATE TEMP TABLE q_result(\n  -- A.\n  a LONG,\n  -- B.\n  b STRING\n);\n{select}"
    with pytest.raises(QueryError, match=rf"query q: the reduce returns the columns "
                                         rf"{returned.replace('(', '[(]').replace(')', '[)]')}, "
                                         r"but its CREATE TEMP TABLE q_result declares \(a, b\)"):
        reduce_rows("q", reduce_sql, MAP)


def test_declared_reduce_rows_are_the_selects_own():
    # The rows never pass through the declared table: its STRING column would have NUMERIC
    # affinity in SQLite, turning the text '3.9' into a number. An empty result keeps the
    # declared columns.
    reduce_sql = ("-- Why.\nCREATE TEMP TABLE q_result(a STRING, b DOUBLE, c LONG);\n"
                  "SELECT '3.9' AS a, 1 AS b, x AS c FROM map ORDER BY x")
    rows = reduce_rows("q", reduce_sql, MAP)
    assert rows.to_dict("list") == {"a": ["3.9", "3.9"], "b": [1, 1], "c": [1, 2]}
    empty = reduce_rows("q", reduce_sql.replace("ORDER BY x", "WHERE x > 5"), MAP)
    assert list(empty.columns) == ["a", "b", "c"] and empty.empty
    with pytest.raises(QueryError, match="must end with ';'"):
        reduce_rows("q", "CREATE TEMP TABLE q_result(a LONG)\nSELECT 1 AS a", MAP)


def _query_file(tmp_path, reduce_sql: str):
    path = tmp_path / "mine.sql"
    path.write_text("CREATE OR REPLACE PERFETTO FUNCTION mine_map()\nRETURNS TABLE(\n"
                    "  -- Rank.\n  rank STRING\n)\nAS\nSELECT 'TP0' AS rank;\n\n"
                    f"SELECT * FROM mine_map()\n\n-- @reduce\n{reduce_sql}", encoding="utf-8")
    return path


def test_a_cross_rank_query_must_declare_its_result(tmp_path):
    spec = load_spec(_query_file(tmp_path, "CREATE TEMP TABLE mine_result(\n  -- How many.\n"
                                           "  n LONG\n);\nSELECT COUNT(*) AS n FROM map"))
    assert [(c.name, c.type, c.doc) for c in spec.columns] == [("n", "LONG", "How many.")]
    assert split_sql(spec.sql)[1].lstrip().startswith("CREATE TEMP TABLE")
    with pytest.raises(QueryError, match=r"no declared columns: start it with CREATE TEMP TABLE "
                                         r"mine_result\(columns\);"):
        load_spec(_query_file(tmp_path, "SELECT COUNT(*) AS n FROM map"))
    plain = tmp_path / "plain.sql"  # a query without a function, too
    plain.write_text("SELECT 'TP0' AS rank\n-- @reduce\nSELECT COUNT(*) AS n FROM map")
    with pytest.raises(QueryError, match="no declared columns: start it with CREATE TEMP TABLE"):
        load_spec(plain)
    # the old declaration, a comment nothing checked, is refused with the new way
    old = "-- RETURNS TABLE(\n--   n LONG\n-- )\nSELECT COUNT(*) AS n FROM map"
    with pytest.raises(QueryError, match=r"'-- RETURNS TABLE\(' comment \(line 12\): start it "
                                         r"with CREATE TEMP TABLE mine_result"):
        load_spec(_query_file(tmp_path, old))
