"""``tokentrace query`` / ``tokentrace queries``: outputs, and one-line errors with exit 1."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from tokentrace.catalog.export import read_metadata
from tokentrace.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def proton(sample_t39):
    return str(sample_t39 / "sample-TP1.proton.chrome_trace.gz")


def _run(*args):
    return runner.invoke(app, list(args))


def _error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_queries_lists_catalogue():
    result = _run("queries")
    assert result.exit_code == 0
    assert "kernel_summary" in result.stdout and "name_glob" in result.stdout
    assert "trace_health" in result.stdout


def test_queries_shows_durations_in_microseconds():
    result = runner.invoke(app, ["queries"], env={"COLUMNS": "400"})  # wide: no wrapped cells
    assert result.exit_code == 0, result.output
    assert "min_gap_us DURATION_US (µs, default 100, >= 0)" in result.stdout
    assert "max_gap_us DURATION_US (µs, default 0, >= 0)" in result.stdout
    assert "100000" not in result.stdout


def test_queries_names():
    result = _run("queries", "--names")
    assert result.exit_code == 0
    names = result.stdout.split()
    assert {"gpu_gaps", "kernel_summary", "trace_health"} <= set(names) and names == sorted(names)


def test_parquet_metadata_keeps_microseconds(merged_t39, tmp_path):
    merged, _ = merged_t39
    out = tmp_path / "gaps.parquet"
    result = _run("query", "gpu_gaps", str(merged), "-o", str(out))
    assert result.exit_code == 0, result.stderr
    assert read_metadata(out)["parameters"] == {"min_gap_us": 100, "launch_overhead_us": 10,
                                                "startup_kernels": 10, "rank": ""}
    assert pd.read_parquet(out).dur.min() >= 100_000  # the SQL compared ns
    result = _run("query", "gpu_gaps", str(merged), "-o", str(out), "-p", "min_gap_us=2ms",
                  "-p", "launch_overhead_us=2.5")
    assert result.exit_code == 0, result.stderr
    params = read_metadata(out)["parameters"]
    assert params["min_gap_us"] == 2000 and params["launch_overhead_us"] == 2.5
    gaps = pd.read_parquet(out)
    assert len(gaps) > 0 and gaps.dur.min() >= 2_000_000


def test_parquet_with_metadata(proton, tmp_path):
    out = tmp_path / "k.parquet"
    result = _run("query", "kernel_summary.sql", proton, "-o", str(out), "-p", "name_glob=nvjet*")
    assert result.exit_code == 0, result.stderr
    frame = pd.read_parquet(out)
    assert frame.kernel.str.startswith("nvjet").all() and frame["count"].dtype == "int64"
    meta = read_metadata(out)
    assert meta["parameters"] == {"name_glob": "nvjet*"} and meta["trace"] == proton
    assert meta["engine"].startswith("embedded") and meta["tool_version"]
    assert "flow_duplicate_id 2360" in result.stderr  # the load warning, once
    assert result.stderr.count("warning:") == 1


def test_several_queries_into_folder(proton, tmp_path):
    result = _run("query", "kernel_summary", "trace_health", proton, "-o", str(tmp_path / "o"),
                  "--format", "json")
    assert result.exit_code == 0, result.stderr
    health = json.loads((tmp_path / "o" / "trace_health.json").read_text())
    assert health["rows"][0]["kernels"] == 2717 and health["metadata"]["query"]
    assert (tmp_path / "o" / "kernel_summary.json").is_file()
    assert not list((tmp_path / "o").glob(".*tmp"))  # atomic writes leave no temp file


def test_prints_table_and_user_sql(proton, tmp_path):
    own = tmp_path / "mine.sql"
    own.write_text("-- mine: kernels per name.\nCREATE OR REPLACE PERFETTO FUNCTION mine(\n"
                   "  -- How many.\n  n LONG\n)\nRETURNS TABLE(name STRING, c LONG) AS\n"
                   "SELECT name, COUNT(*) AS c FROM slice WHERE category = 'kernel' "
                   "GROUP BY name ORDER BY c DESC, name LIMIT $n;\n\nSELECT * FROM mine(2);\n")
    result = _run("query", str(own), proton, "-p", "n=3")
    assert result.exit_code == 0, result.stderr
    assert "3 rows" in result.stdout and "rmsnorm_kernel" in result.stdout and "320" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["nope_query"], "error: unknown query 'nope_query': not a bundled query ("),
    (["kernel_summary", "-p", "bogus=1"], "error: query kernel_summary has no parameter bogus; "
                                          "valid parameters: name_glob STRING"),
    (["kernel_summary", "-p", "name_glob"], "error: --param 'name_glob': expected NAME=VALUE"),
])
def test_bad_query_or_parameter(proton, args, message):
    result = _run("query", *args[:1], proton, *args[1:])
    assert result.exit_code == 1
    assert _error_line(result).startswith(message)


def test_bad_sql(proton, tmp_path):
    own = tmp_path / "broken.sql"
    own.write_text("SELECT * FROM no_such_table;\n")
    result = _run("query", str(own), proton)
    assert result.exit_code == 1
    assert "no such table: no_such_table" in _error_line(result)


def test_bad_trace(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("not a trace")
    result = _run("query", "trace_health", str(bad))
    assert result.exit_code == 1
    assert "could not parse the trace" in _error_line(result)
    result = _run("query", "trace_health", str(tmp_path / "missing.json"))
    assert result.exit_code == 1 and "no such trace file" in _error_line(result)


def test_bad_output_and_engine(proton, tmp_path):
    result = _run("query", "trace_health", proton, "-o", str(tmp_path / "x.xlsx"))
    assert result.exit_code == 1 and "cannot tell the output format" in _error_line(result)
    result = _run("query", "trace_health", proton, "--engine", "remote", "--address", "127.0.0.1:9")
    assert result.exit_code == 1 and "no trace processor server" in _error_line(result)


def test_prints_nulls_and_wide_rows(proton, tmp_path):
    # An integer column with a NULL becomes pandas Int64 holding pd.NA; printing must not fail.
    user_sql = tmp_path / "nulls.sql"
    user_sql.write_text("SELECT NULL AS maybe, 1 AS one UNION ALL SELECT 7, 2 ORDER BY one")
    result = _run("query", str(user_sql), proton)
    assert result.exit_code == 0, result.output
    assert "2 rows" in result.stdout and "7" in result.stdout
    wide = tmp_path / "wide.sql"
    wide.write_text("SELECT " + ", ".join(f"'{'v' * 20}' AS column_{i}" for i in range(12)))
    result = _run("query", str(wide), proton)
    assert result.exit_code == 0, result.output
    assert "row 1" in result.stdout and "column_11" in result.stdout
