"""Parameter declaration, validation and literal rendering (no engine)."""

from __future__ import annotations

import pytest

from tokentrace.catalog import QuerySpec, render_sql
from tokentrace.catalog.params import Param, convert, parse_assignments, parse_param_line, render
from tokentrace.errors import QueryError


def _spec(sql: str, *params: Param) -> QuerySpec:
    return QuerySpec("q", __import__("pathlib").Path("q.sql"), "test", params, (), sql)


def test_header_line_parsing():
    param = parse_param_line("@param min_gap_us DURATION_US 100  Minimum idle time.", "x")
    assert param == Param("min_gap_us", "DURATION_US", 100_000, "Minimum idle time.")
    quoted = parse_param_line("@param glob STRING 'it''s *'  A pattern.", "x")
    assert quoted.default == "it's *" and quoted.doc == "A pattern."
    assert parse_param_line("@param n INT -  Required.", "x").default is None
    with pytest.raises(QueryError, match="TYPE one of"):
        parse_param_line("@param n NUMBER 3  bad type", "x")


@pytest.mark.parametrize("type_name, text, literal", [
    ("INT", "42", "42"), ("INT", "-7", "-7"), ("FLOAT", "0.5", "0.5"),
    ("BOOL", "true", "1"), ("BOOL", "no", "0"),
    ("DURATION_US", "250", "250000"), ("DURATION_US", "2ms", "2000000"),
    ("DURATION_US", "1.5us", "1500"), ("DURATION_US", "300ns", "300"),
    ("STRING", "a'b", "'a''b'"), ("STRING", "x'); DROP TABLE slice; --", "'x''); DROP TABLE slice; --'"),
])
def test_render_literal(type_name, text, literal):
    param = Param("p", type_name, None, "")
    assert render(param, convert(param, text)) == literal


@pytest.mark.parametrize("type_name, text", [
    ("INT", "1.5"), ("INT", "1; DROP"), ("FLOAT", "nan"), ("FLOAT", "inf"), ("BOOL", "maybe"),
    ("DURATION_US", "5 parsecs"), ("STRING", "a\0b"),
])
def test_ill_typed_values_rejected(type_name, text):
    with pytest.raises(QueryError, match=f"not a valid {type_name}"):
        convert(Param("p", type_name, None, ""), text)


def test_substitution_defaults_unknown_and_missing():
    spec = _spec("SELECT ${a} AS a, ${b} AS b", Param("a", "INT", 1, ""), Param("b", "STRING", None, ""))
    assert render_sql(spec, {"b": "${a}"}) == "SELECT 1 AS a, '${a}' AS b"  # never re-expanded
    with pytest.raises(QueryError, match=r"needs parameter b; valid parameters: a INT"):
        render_sql(spec, {})
    with pytest.raises(QueryError, match=r"has no parameter zz; valid parameters: a INT"):
        render_sql(spec, {"zz": "1", "b": "x"})


def test_undeclared_placeholder_rejected():
    with pytest.raises(QueryError, match="placeholder"):
        render_sql(_spec("SELECT ${nope}"), {})


def test_assignments():
    assert parse_assignments(["a=1", "b=x=y"]) == {"a": "1", "b": "x=y"}
    with pytest.raises(QueryError, match="NAME=VALUE"):
        parse_assignments(["novalue"])


def test_declared_lower_bound():
    from tokentrace.catalog.params import convert, parse_param_line

    top = parse_param_line("@param top INT>=1 5  Frames per gap.", "q.sql")
    assert top.minimum == 1 and top.default == 5 and "default 5, >= 1" in top.describe()
    assert convert(top, "1") == 1
    with pytest.raises(QueryError, match=r"parameter top must be >= 1 \(got '0'\)"):
        convert(top, "0")
    gap = parse_param_line("@param min_gap_us DURATION_US>=0 100  Shortest gap.", "q.sql")
    assert convert(gap, "0") == 0 and convert(gap, "2ms") == 2_000_000
    with pytest.raises(QueryError, match="min_gap_us must be >= 0"):
        convert(gap, "-1ns")
