"""docs/stall-queries.md's table of bundled queries equals the one generated from the .sql headers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokentrace.catalog import list_queries
from tokentrace.catalog.docs import BEGIN, END, current_table, main, markdown_table, replace_table

ANALYSES = Path(__file__).resolve().parents[2] / "docs" / "stall-queries.md"


def test_analyses_md_table_is_generated_from_headers():
    table = current_table(ANALYSES.read_text(encoding="utf-8"))
    assert table is not None, f"{ANALYSES}: no '<!-- queries:begin' ... '{END}' markers"
    assert table == markdown_table(), (
        "docs/stall-queries.md's query table is stale: run "
        "`python -m tokentrace.catalog.docs docs/stall-queries.md` and review the diff")


def test_table_covers_every_query_with_units():
    table = markdown_table()
    for spec in list_queries():
        assert f"| `{spec.name}` | {spec.purpose.replace('|', chr(92) + '|')} |" in table
    assert "`min_gap_us` (DURATION_US, µs, default `100`, >= 0)" in table
    assert "`include_startup` (BOOL, default `false`)" in table
    assert "100000" not in table


def test_rewrite_and_check(tmp_path, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text(f"# Title\n\n{BEGIN}\nold table\n{END}\n\nafter\n", encoding="utf-8")
    assert main(["--check", str(doc)]) == 1 and "stale" in capsys.readouterr().err
    assert main([str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    assert text == f"# Title\n\n{BEGIN}\n{markdown_table()}\n{END}\n\nafter\n"
    assert main(["--check", str(doc)]) == 0
    with pytest.raises(ValueError, match="queries:begin"):
        replace_table("no markers here", "x")
