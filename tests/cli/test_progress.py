"""Issue 45, progress: one plain line per stage on standard error when it is not a terminal,
rich lines on one, nothing with --quiet; the first engine compile announced once. And the
command line needs no matplotlib (a notebook extra)."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from tokentrace.cli import app
from tokentrace.cli.progress import PREFIX, StageLines, compile_note, engine_compiled
from tokentrace.options import EngineOptions

ROOT = Path(__file__).resolve().parents[2]


def _run_stages(lines: StageLines) -> None:
    with lines:
        lines.stage("merging ranks", 2)
        lines.advance("TP0")
        lines.advance("TP1")
        lines.advance("")  # the combined file: no rank
        lines.stage("merging ranks", 2)  # the same stage again: no second line
        lines.stage("writing tables")
        lines.note("a note")


def test_one_plain_line_per_stage_when_not_a_terminal(capsys):
    _run_stages(StageLines(terminal=False))
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = [re.sub(r"\d+\.\d s$", "T s", line) for line in captured.err.splitlines()]
    assert lines == [f"{PREFIX}merging ranks (2 ranks): T s", f"{PREFIX}a note", f"{PREFIX}writing tables: T s"]


def test_a_failing_stage_prints_no_line(capsys):
    """A command failing in its first stage (its checks) keeps its one `error:` line."""
    lines = StageLines(terminal=False)
    try:
        with lines:
            lines.note("first run on this machine: compiling")
            lines.stage("merging ranks", 2)
            raise ValueError("bad input")
    except ValueError:
        pass
    assert capsys.readouterr().err == ""


def test_quiet_prints_nothing(capsys):
    _run_stages(StageLines(quiet=True, terminal=True))
    assert capsys.readouterr() == ("", "")


def test_terminal_lines_count_ranks(monkeypatch):
    from rich.console import Console

    screen = io.StringIO()
    monkeypatch.setattr("rich.console.Console", lambda **kw: Console(file=screen, force_terminal=True,
                                                                    width=100))
    lines = StageLines(terminal=True)
    with lines:
        lines.stage("merging ranks", 2)
        lines.advance("TP0")
        lines.advance("TP1")
        task = lines._bar.tasks[0]
        assert (task.completed, task.total) == (2, 2)
        lines.stage("writing tables")
    text = screen.getvalue()
    assert "merging ranks" in text and "2/2" in text and "writing tables" in text


def test_first_compile_is_announced_only_when_no_module_is_cached(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TOKENTRACE_CACHE_DIR", str(tmp_path / "empty"))
    options = EngineOptions(stoppable=False)
    assert not engine_compiled(options)
    with StageLines(terminal=False) as lines:
        compile_note(lines, options)
        lines.stage("loading")
    assert "compiling the trace processor engine" in capsys.readouterr().err
    compile_note(StageLines(quiet=True, terminal=False), options)
    assert capsys.readouterr().err == ""
    assert engine_compiled(EngineOptions("native"))  # no compile for other engines


def test_merge_command_stage_line_and_quiet(tmp_path):
    runner = CliRunner()
    missing = tmp_path / "nothing-here"
    missing.mkdir()
    shown = runner.invoke(app, ["merge", str(missing), "-o", str(tmp_path / "out")])
    quiet = runner.invoke(app, ["merge", str(missing), "-o", str(tmp_path / "out"), "--quiet"])
    assert shown.exit_code == quiet.exit_code == 1  # no ranks: the merge says why
    assert shown.stderr.startswith("error: ") and len(shown.stderr.splitlines()) == 1
    assert PREFIX not in quiet.stderr and "error:" in quiet.stderr


def test_matplotlib_is_no_core_dependency():
    import pytest

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert not any(d.startswith("matplotlib") for d in project["dependencies"])
    assert any(d.startswith("matplotlib") for d in project["optional-dependencies"]["notebook"])
    # every command and the report import without it (plots.py imports it when it draws)
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "import tokentrace.cli, tokentrace.report.pipeline, tokentrace.report.html\n"
            "import tokentrace.report.figures, tokentrace.report.charts, tokentrace.notebook\n"
            "print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.strip() == "ok", done.stderr
