"""The diffs the tests read, each run once per session on real traces with the embedded engine."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from support.paths import DATA
from tokentrace.cli import app

PAIR = DATA / "diff_serve_engine"


@dataclasses.dataclass
class DiffRun:
    """One ``tokentrace diff`` run: exit code, standard output and error, and its tables."""

    output: Path
    exit_code: int
    stdout: str
    stderr: str
    tables: dict[str, pd.DataFrame]


def run_diff(before: Path, after: Path, output: Path, *extra: str) -> DiffRun:
    """Runs the CLI in-process; reads the tables it wrote before a later run replaces them."""
    result = CliRunner().invoke(app, ["diff", str(before), str(after), "-o", str(output), *extra])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    tables = {p.stem: pd.read_parquet(p) for p in sorted((output / "tables").glob("*.parquet"))}
    html = output / "diff.html"
    return DiffRun(output, result.exit_code, result.stdout, result.stderr,
                   tables | ({"html": html.read_text()} if html.is_file() else {}))


@pytest.fixture(scope="session")
def serve_pair() -> tuple[Path, Path]:
    """The recorded before/after pair (tests/data/README.md: stalls on, then off)."""
    return PAIR / "before", PAIR / "after"


@pytest.fixture(scope="session")
def serve_diffs(serve_pair, tmp_path_factory) -> dict[str, DiffRun]:
    """``diff before after``, ``diff after before --fail-on-regression 0`` and ``diff before
    before --fail-on-regression 0``, into one folder (each merge made once, then reused)."""
    before, after = serve_pair
    out = tmp_path_factory.mktemp("serve_diff")
    return {"forward": run_diff(before, after, out),
            "reverse": run_diff(after, before, out, "--fail-on-regression", "0"),
            "self": run_diff(before, before, out, "--fail-on-regression", "0")}


@pytest.fixture(scope="module")
def hta_pair(tmp_path_factory) -> dict[str, object]:
    """HTA's TraceDiff pair cut (tests/data/peers/diff_hta__trace_diff__*), each trace in a folder of
    its own (its rank from distributedInfo), diffed with ``--fail-on-regression`` 50 and 45."""
    root = tmp_path_factory.mktemp("hta_pair")
    for side in ("control", "test"):
        trace = DATA / "peers" / f"diff_hta__trace_diff__{side}__{side}.json.gz"
        (root / side).mkdir()
        shutil.copy(trace, root / side / trace.name)
    out = root / "out"
    return {"root": root,
            "forward": run_diff(root / "control", root / "test", out, "--fail-on-regression", "50"),
            "strict": run_diff(root / "control", root / "test", out, "--fail-on-regression", "45")}


@pytest.fixture(scope="session")
def diff_cli():
    """:func:`run_diff`, for test modules (they cannot import this conftest by name)."""
    return run_diff
