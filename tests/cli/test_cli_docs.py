"""Every command is documented: help text in the CLI and a line in the README."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokentrace.cli import app

README = Path(__file__).resolve().parents[2] / "README.md"
COMMANDS = sorted(command.name or command.callback.__name__ for command in app.registered_commands)


def test_all_commands_registered():
    assert COMMANDS == ["analyze", "diff", "merge", "queries", "query", "record", "view"]


@pytest.mark.parametrize("name", COMMANDS)
def test_command_has_help_and_readme_line(name):
    result = CliRunner().invoke(app, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage: tokentrace " + name in " ".join(result.output.split())
    assert f"tokentrace {name} " in README.read_text()


def test_readme_starts_with_the_two_setup_commands():
    lines = [line for line in README.read_text().splitlines() if line.startswith(".venv/bin/")
             or line.startswith("python3 -m venv")]
    assert lines[0].startswith("python3 -m venv .venv") and "tokentrace analyze" in lines[0]
    assert lines[1] == ".venv/bin/pytest -q"
