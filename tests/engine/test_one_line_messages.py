"""Two user mistakes, each one line on stderr (issue 48): a query file with an undeclared
``${x}`` placeholder (the line names ``x`` and the file), and ``--wasm`` pointing at a file that is
not Perfetto's trace processor (the line names the file; before: a wasmtime message of three
lines, or a ``KeyError`` traceback for a valid module without its exports)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
PROTON = DATA / "sample_t39_tp2" / "sample-TP0.proton.chrome_trace.gz"
TOKENTRACE = [sys.executable, "-c", "from tokentrace.cli import main; main()"]


def _query(sql: Path, *options: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*TOKENTRACE, "query", str(sql), str(PROTON), "-o", str(tmp_path / "out.parquet"),
                           *options], capture_output=True, text=True, timeout=300, cwd=tmp_path)


def _one_error_line(done: subprocess.CompletedProcess, *fragments: str) -> str:
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if not line.startswith("tokentrace: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("sql", [
    "SELECT ${x} AS a FROM slice",
    "-- a query of the old kind\n-- @param n INT 1\nSELECT ts FROM slice\nWHERE dur > ${x}\n",
], ids=["placeholder", "placeholder-after-a-header"])
def test_an_undeclared_placeholder_is_one_line_naming_it(sql, tmp_path):
    query = tmp_path / "mine.sql"
    query.write_text(sql)
    line = _one_error_line(_query(query, tmp_path=tmp_path), str(query), "${x}")
    assert f"line {sql[:sql.index('${x}')].count(chr(10)) + 1}" in line
    assert not (tmp_path / "out.parquet").exists()


def _wasm_cases(tmp_path: Path) -> dict[str, bytes]:
    return {
        "text": b"not wasm at all",
        "empty": b"",
        "truncated": b"\0asm\x01\0\0\0\x01\x05",  # a section cut short
        "version-2": b"\0asm\x02\0\0\0",
        "another-module": b"\0asm\x01\0\0\0",  # valid, but exports nothing
    }


@pytest.mark.parametrize("case", ["text", "empty", "truncated", "version-2", "another-module"])
def test_a_wasm_that_is_not_the_trace_processor_is_one_line(case, tmp_path):
    wasm = tmp_path / f"{case}.wasm"
    wasm.write_bytes(_wasm_cases(tmp_path)[case])
    query = tmp_path / "plain.sql"
    query.write_text("SELECT 1 AS a")
    line = _one_error_line(_query(query, "--wasm", str(wasm), tmp_path=tmp_path),
                           f"{wasm}: not a WebAssembly module", "trace_processor.wasm")
    assert "Caused by" not in line
