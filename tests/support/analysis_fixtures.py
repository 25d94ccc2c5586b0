"""`tokentrace analyze` run once per sample and test session (through the command line), and an
:class:`Analysis` opened on the same cached merge (so no test merges twice)."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokentrace.cli import app
from tokentrace.errors import TokentraceWarning


@dataclasses.dataclass
class AnalyzeRun:
    """One `tokentrace analyze` run: its folder, exit code and terminal output."""

    source: Path
    output: Path
    exit_code: int
    stdout: str


def run_analyze(source: Path, output: Path, *extra: str) -> AnalyzeRun:
    """Runs the CLI in-process; returns what it did."""
    result = CliRunner().invoke(app, ["analyze", str(source), "-o", str(output), *extra])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return AnalyzeRun(source, output, result.exit_code, result.output)


@pytest.fixture(scope="session")
def analyzed_t39(sample_t39, analyze_root) -> AnalyzeRun:
    """`tokentrace analyze tests/data/sample_t39_tp2 -o <tmp>` (anchored, flows); reuses the
    session's merge of the sample (``merged_sets``) when that ran first."""
    return run_analyze(sample_t39, analyze_root / "sample_t39_tp2")


@pytest.fixture(scope="session")
def analyzed_t36(sample_t36, analyze_root) -> AnalyzeRun:
    """`tokentrace analyze tests/data/sample_t36_tp2 -o <tmp>` (no anchor, no flows)."""
    return run_analyze(sample_t36, analyze_root / "sample_t36_tp2")


@pytest.fixture(scope="session")
def analysis_t39(analyzed_t39):
    """An open Analysis of sample_t39_tp2, reusing the merge the analyze run cached in the
    user cache (the session's: tests/conftest.py)."""
    from tokentrace.notebook import open_analysis

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TokentraceWarning)
        trace = open_analysis(analyzed_t39.source)
    yield trace
    trace.close()
