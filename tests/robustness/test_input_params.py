"""Issue 31: a ``--param`` value is a literal only. A string holding a ``-- @reduce`` line, a
comment opener or a quote must reach the SQL as one quoted literal and never change how the
query is split (map / reduce) or what runs."""

from __future__ import annotations

import pandas as pd
import pytest

from tokentrace.catalog.headers import find_query
from tokentrace.catalog.run import run_map, run_query

QUERY = """-- Echo a label.
CREATE OR REPLACE PERFETTO FUNCTION echo(
  -- A label.
  label STRING
)
RETURNS TABLE(
  -- The label.
  label STRING
)
AS SELECT $label AS label;

SELECT * FROM echo('x')
"""
HOSTILE = [
    "a\n-- @reduce\nSELECT 42 AS label",
    "a\n--@reduce\nSELECT 42 AS label",
    "a' AS label; SELECT 42 AS label --",
    "a */ SELECT 42 /*",
    "a\n-- @reduce",
]


class _Engine:
    """Records the SQL sent; answers with the one string literal it holds, as SQLite would."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def query(self, sql: str) -> pd.DataFrame:
        self.sent.append(sql)
        start, end = sql.index("'", sql.index("SELECT ")), sql.rindex("'")
        return pd.DataFrame({"label": [sql[start + 1:end].replace("''", "'")]})


@pytest.fixture()
def spec(tmp_path):
    path = tmp_path / "echo.sql"
    path.write_text(QUERY)
    return find_query(str(path))


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_value_is_one_literal(spec, value):
    engine = _Engine()
    rows = run_query(engine, spec, {"label": value})
    assert len(engine.sent) == 1 and engine.sent[0].count("SELECT") == 2 + value.count("SELECT")
    assert rows["label"].tolist() == [value]  # no reduce ran: the value came back whole
    assert run_map(_Engine(), spec, {"label": value})["label"].tolist() == [value]
