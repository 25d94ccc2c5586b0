"""Parameter declaration, validation and literal rendering (no engine)."""

from __future__ import annotations

import pytest

from tokentrace.catalog import QuerySpec, effective_params, load_spec, render_sql
from tokentrace.catalog.params import Param, convert, parse_assignments, parse_param_line, render
from tokentrace.errors import QueryError


def _spec(sql: str, *params: Param) -> QuerySpec:
    return QuerySpec("q", __import__("pathlib").Path("q.sql"), "test", params, (), sql)


def test_header_line_parsing():
    param = parse_param_line("@param min_gap_us DURATION_US 100  Minimum idle time.", "x")
    assert param == Param("min_gap_us", "DURATION_US", 100, "Minimum idle time.")  # µs
    assert param.sql_name == "min_gap_ns" and param.unit == "µs"
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
    assert convert(gap, "0") == 0 and convert(gap, "2ms") == 2_000
    assert "min_gap_us DURATION_US (µs, default 100, >= 0)" == gap.describe()
    with pytest.raises(QueryError, match=r"min_gap_us must be >= 0 µs \(got '-1ns'\)"):
        convert(gap, "-1ns")


@pytest.mark.parametrize("value, micros", [
    ("100", 100), (100, 100), (2.0, 2), (2.5, 2.5), ("2ms", 2_000), ("1s", 1_000_000),
    ("1.5us", 1.5), ("1.5µs", 1.5), ("300ns", 0.3), ("2000.0us", 2_000), ("0", 0),
])
def test_durations_are_held_in_microseconds(value, micros):
    param = Param("x_us", "DURATION_US", None, "")
    converted = convert(param, value)
    assert converted == micros and type(converted) is type(micros)
    assert render(param, converted) == str(round(micros * 1000))  # the SQL gets ns


def test_duration_out_of_sql_range_rejected():
    with pytest.raises(QueryError, match="not a valid DURATION_US"):
        convert(Param("x_us", "DURATION_US", None, ""), "1" + "0" * 30)


def test_duration_names_tell_their_unit():
    with pytest.raises(QueryError, match=r"DURATION_US parameter 'min_gap' must be named '\*_us'"):
        parse_param_line("@param min_gap DURATION_US 100  Shortest gap.", "q.sql")
    with pytest.raises(QueryError, match="named '\\*_us' but is INT; declare it DURATION_US"):
        parse_param_line("@param wait_us INT 100  Not a duration.", "q.sql")


def test_sql_receives_nanoseconds_under_ns_names():
    spec = _spec("SELECT ${gap_ns} AS g, ${n} AS n",
                 Param("gap_us", "DURATION_US", 100, "", 0), Param("n", "INT", 1, ""))
    assert render_sql(spec) == "SELECT 100000 AS g, 1 AS n"
    assert render_sql(spec, {"gap_us": "2ms"}) == "SELECT 2000000 AS g, 1 AS n"
    assert effective_params(spec, {"gap_us": "2ms"}) == {"gap_us": 2000, "n": 1}  # µs
    assert effective_params(spec) == {"gap_us": 100, "n": 1}
    with pytest.raises(QueryError, match="has no parameter gap_ns"):
        render_sql(spec, {"gap_ns": 5})  # people give µs under the _us name


def test_us_placeholder_of_a_duration_rejected():
    spec = _spec("SELECT ${gap_us}", Param("gap_us", "DURATION_US", 100, ""))
    with pytest.raises(QueryError, match=r"use \$\{gap_ns\} instead of \$\{gap_us\}: "
                                         "the SQL receives nanoseconds"):
        render_sql(spec)


def test_header_parameters_unique_and_continued(tmp_path):
    clash = tmp_path / "clash.sql"
    clash.write_text("-- clash: two names for one placeholder.\n"
                     "-- @param gap_us DURATION_US 1  A duration.\n-- @param gap_ns INT 1  An int.\n"
                     "SELECT ${gap_ns};\n")
    with pytest.raises(QueryError, match="@param gap_ns clashes with @param gap_us"):
        load_spec(clash)
    long = tmp_path / "long.sql"
    long.write_text("-- long: a query.\n--\n-- @param n INT 1  First line,\n--   second line.\n"
                    "-- @column c INT -  A column.\nSELECT ${n} AS c;\n")
    assert load_spec(long).params[0].doc == "First line, second line."
