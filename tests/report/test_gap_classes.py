"""The one gap-class table (tokentrace.gap_classes) lists exactly the classes the SQL produces,
in the SQL's order, and everything that shows classes takes them from it."""

from __future__ import annotations

import re

from tokentrace import gap_classes
from tokentrace.catalog import bundled_dir, find_query


def test_names_are_the_gap_class_column_doc_of_gpu_gaps():
    column = next(c for c in find_query("gpu_gaps").columns if c.name == "gap_class")
    assert tuple(re.findall(r"`(\w+)`", column.doc)) == gap_classes.NAMES


def test_names_are_what_tt_gap_class_returns():
    sql = (bundled_dir() / "tokentrace" / "gaps.sql").read_text(encoding="utf-8")
    body = sql[sql.index("CREATE PERFETTO FUNCTION tt_gap_class"):]
    body = body[:body.index("END;")]
    assert set(re.findall(r"(?:THEN|ELSE) '(\w+)'", body)) == set(gap_classes.NAMES)


def test_every_class_has_its_idle_column_in_the_sql_order():
    for query in ("gpu_windows", "step_breakdown"):
        columns = [c.name for c in find_query(query).columns]
        idle = [c for c in columns if c in {gap_classes.idle_column(n) for n in gap_classes.NAMES}]
        assert idle == [gap_classes.idle_column(n) for n in gap_classes.NAMES], query
    assert gap_classes.idle_column(gap_classes.SHORT_IDLE.name) in [
        c.name for c in find_query("step_breakdown").columns]


def test_the_samples_produce_only_known_classes(analyzed_t39, analyzed_t36):
    import pandas as pd

    seen = set()
    for run in (analyzed_t39, analyzed_t36):
        seen |= set(pd.read_parquet(run.output / "tables" / "gap_causes.parquet")["gap_class"])
    assert seen <= set(gap_classes.NAMES) and "host_late" in seen


def test_each_class_has_a_meaning_and_its_own_colour():
    table = (*gap_classes.GAP_CLASSES, gap_classes.SHORT_IDLE)
    assert all(c.meaning and c.color.startswith("#") for c in table)
    assert len({c.color for c in table}) == len(table)
    from tokentrace.report.plots import BUSY_COLOR
    assert BUSY_COLOR not in {c.color for c in table}  # the plots draw GPU busy time too
    assert gap_classes.color("not_a_class") == "black"
    assert gap_classes.get("host_late").name == "host_late"
