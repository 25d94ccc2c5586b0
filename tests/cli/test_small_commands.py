"""Small command-line behaviours a new user meets first: the version, a folder given to
`query`, an empty `-o` given to `analyze`."""

from __future__ import annotations

from typer.testing import CliRunner

from support.paths import DATA
from tokentrace.cli import app
from tokentrace.version import tool_version

runner = CliRunner()


def _error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"tokentrace {tool_version()}"


def test_query_on_a_folder_says_what_to_do():
    folder = DATA / "sample_t39_tp2"
    result = runner.invoke(app, ["query", "gpu_gaps", str(folder)])
    assert result.exit_code == 1
    line = _error_line(result)
    assert line.startswith(f"error: {folder}: is a folder; tokentrace query takes one trace file")
    assert f"tokentrace merge {folder} -o all.json --combine" in line and "analyze" in line


def test_analyze_refuses_an_empty_output(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where an empty -o would have written
    for empty in ("", "  "):
        result = runner.invoke(app, ["analyze", str(DATA / "sample_t39_tp2"), "-o", empty])
        assert result.exit_code == 1
        assert _error_line(result).startswith("error: -o is empty: name the output folder")
    assert list(tmp_path.iterdir()) == []
