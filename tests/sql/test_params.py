"""Parameters from typed function signatures: declaration, validation, literal rendering (no
engine)."""

from __future__ import annotations

import pytest

from tokentrace.catalog import QuerySpec, effective_params, load_spec, render_sql
from tokentrace.catalog.functions import Field
from tokentrace.catalog.params import Param, convert, param_from_arg, parse_assignments, render
from tokentrace.errors import QueryError


def _query(tmp_path, args: str, call: str, body: str = "SELECT 1 AS c") -> QuerySpec:
    """A query file declaring its own function: ``args`` its signature, ``call`` the call's
    arguments (the defaults)."""
    path = tmp_path / "q.sql"
    path.write_text(f"-- A test query.\nCREATE OR REPLACE PERFETTO FUNCTION q_fn({args})\n"
                    f"RETURNS TABLE(c LONG) AS\n{body};\n\nSELECT * FROM q_fn({call});\n")
    return load_spec(path)


def _param(arg: str, default: str, doc: str = "") -> Param:
    name, type_name = arg.split()
    return param_from_arg(Field(name, type_name, doc), default, [], "q.sql")


def test_arguments_are_parameters():
    param = _param("min_gap_ns DURATION", "100000", "Minimum idle time (>= 0).")
    assert param == Param("min_gap_us", "DURATION_US", 100, "Minimum idle time (>= 0).", 0)  # µs
    assert param.sql_name == "min_gap_ns" and param.unit == "µs"
    assert _param("glob STRING", "'it''s *'").default == "it's *"
    assert _param("flag BOOL", "TRUE").default is True and _param("n LONG", "3").default == 3
    assert _param("x DOUBLE", "0.5").default == 0.5
    with pytest.raises(QueryError, match="a query's arguments are LONG, DOUBLE"):
        _param("n BYTES", "3")
    with pytest.raises(QueryError, match="not a STRING literal"):
        _param("s STRING", "3")


def test_constant_function_default():
    module = "CREATE PERFETTO FUNCTION k_default()\nRETURNS DURATION AS\nSELECT 2000;\n"
    param = param_from_arg(Field("gap_ns", "DURATION", ""), "k_default()", [module], "q.sql")
    assert param.default == 2  # µs
    with pytest.raises(QueryError, match=r"nope\(\) is not a constant function"):
        param_from_arg(Field("gap_ns", "DURATION", ""), "nope()", [module], "q.sql")


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


def test_call_rendering_defaults_and_unknown(tmp_path):
    spec = _query(tmp_path, "a LONG, b STRING", "1, 'x'", "SELECT $a AS c")
    # a value is a literal, whatever it holds
    assert render_sql(spec, {"b": "${a}'"}).endswith("SELECT * FROM q_fn(1, '${a}''')")
    with pytest.raises(QueryError, match=r"has no parameter zz; valid parameters: a INT"):
        render_sql(spec, {"zz": "1"})


def test_call_arguments_must_be_literals(tmp_path):
    with pytest.raises(QueryError, match="must be literals"):
        _query(tmp_path, "a LONG", "1 + 1")
    with pytest.raises(QueryError, match="takes 1 arguments, the call gives 2"):
        _query(tmp_path, "a LONG", "1, 2")


def test_old_headers_refused(tmp_path):
    old = tmp_path / "old.sql"
    old.write_text("-- old: a query.\n-- @param n INT 1  A number.\nSELECT ${n} AS c;\n")
    with pytest.raises(QueryError, match=r"'-- @param' headers and '\$\{name\}' placeholders are gone"):
        load_spec(old)


def test_plain_select_has_no_parameters(tmp_path):
    plain = tmp_path / "plain.sql"
    plain.write_text("-- plain: kernels per name.\nSELECT name, COUNT(*) AS n FROM slice GROUP BY name;\n")
    spec = load_spec(plain)
    assert (spec.purpose, spec.params, render_sql(spec)) == ("kernels per name.", (), plain.read_text())


def test_assignments():
    assert parse_assignments(["a=1", "b=x=y"]) == {"a": "1", "b": "x=y"}
    with pytest.raises(QueryError, match="NAME=VALUE"):
        parse_assignments(["novalue"])


def test_declared_lower_bound():
    top = _param("top LONG", "5", "Frames per gap (>= 1).")
    assert top.minimum == 1 and top.default == 5 and "default 5, >= 1" in top.describe()
    assert convert(top, "1") == 1
    with pytest.raises(QueryError, match=r"parameter top must be >= 1 \(got '0'\)"):
        convert(top, "0")
    gap = _param("min_gap_ns DURATION", "100000", "Shortest gap (>= 0).")
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


def test_duration_arguments_are_named_ns():
    with pytest.raises(QueryError, match=r"DURATION argument 'min_gap' must be named '\*_ns'"):
        _param("min_gap DURATION", "100")


def test_sql_receives_nanoseconds_under_ns_names(tmp_path):
    spec = _query(tmp_path, "gap_ns DURATION, n LONG", "100000, 1", "SELECT $gap_ns + $n AS c")
    assert render_sql(spec).endswith("SELECT * FROM q_fn(100000, 1)")
    assert render_sql(spec, {"gap_us": "2ms"}).endswith("SELECT * FROM q_fn(2000000, 1)")
    assert effective_params(spec, {"gap_us": "2ms"}) == {"gap_us": 2000, "n": 1}  # µs
    assert effective_params(spec) == {"gap_us": 100, "n": 1}
    with pytest.raises(QueryError, match="has no parameter gap_ns"):
        render_sql(spec, {"gap_ns": 5})  # people give µs under the _us name


def test_parameters_unique_and_documented(tmp_path):
    with pytest.raises(QueryError, match="parameter gap_us clashes"):
        _query(tmp_path, "gap_ns DURATION, gap_us LONG", "1, 1")
    path = tmp_path / "long.sql"
    path.write_text("-- A query.\nCREATE OR REPLACE PERFETTO FUNCTION long_fn(\n  -- First line,\n"
                    "  -- second line.\n  n LONG\n)\nRETURNS TABLE(\n  -- A column.\n  c LONG\n)\n"
                    "AS SELECT $n AS c;\nSELECT * FROM long_fn(1);\n")
    spec = load_spec(path)
    assert spec.params[0].doc == "First line, second line." and spec.purpose == "A query."
    assert [(c.name, c.type, c.doc) for c in spec.columns] == [("c", "LONG", "A column.")]


def test_a_call_of_the_engines_own_function_is_a_plain_query(tmp_path):
    path = tmp_path / "own.sql"
    path.write_text("-- own: a slice's ancestors.\nSELECT * FROM ancestor_slice(1 + 1);\n")
    spec = load_spec(path)
    assert spec.params == () and spec.call is None and render_sql(spec) == path.read_text()
