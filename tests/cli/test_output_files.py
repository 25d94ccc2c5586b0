"""What every command writes: mode 0666 less the umask (0644 under 022) for merged traces, query
tables and the report, and no temp file left behind, on success or on an error mid-write."""

from __future__ import annotations

import os
import stat

import pytest
from typer.testing import CliRunner

from tokentrace.cli import app
from tokentrace.errors import InputError
from tokentrace.runtime.files import atomic_output, atomic_path, write_bytes


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _no_temp_files(folder) -> None:
    leftovers = [p for p in folder.rglob("*") if p.name.endswith(".tmp")]
    assert not leftovers, leftovers


def test_merge_and_query_outputs_are_0644(sample_t39, tmp_path, umask_022):
    runner = CliRunner()
    merged = tmp_path / "m.json"
    assert runner.invoke(app, ["merge", str(sample_t39), "--combine", "-o", str(merged)]).exit_code == 0
    assert _mode(merged) == 0o644
    for rank_file in tmp_path.glob("sample-TP*.merged.json"):
        assert _mode(rank_file) == 0o644
    for suffix in ("parquet", "csv", "json"):
        out = tmp_path / f"k.{suffix}"
        result = runner.invoke(app, ["query", "kernel_summary", str(merged), "-o", str(out)])
        assert result.exit_code == 0, result.output
        assert _mode(out) == 0o644
    _no_temp_files(tmp_path)


def test_report_outputs_are_0644(analyzed_t39):
    # the session's analyze run (umask 022 here, as on CI); its folder holds report, tables,
    # plots and the annotated traces
    out = analyzed_t39.output
    written = [out / "report.html", *out.glob("tables/*.parquet"), *out.glob("plots/*.svg"),
               *out.glob("annotated/*")]
    assert len(written) > 10 and len(list(out.glob("annotated/*.annotated.json"))) == 2
    expected = 0o666 & ~_current_umask()
    assert {_mode(p) for p in written} == {expected}
    _no_temp_files(out)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path, umask_022):
    target = tmp_path / "out.json"
    write_bytes(target, b"old")
    with pytest.raises(RuntimeError), atomic_output(target, compress=False) as write:
        write(b"partial")
        raise RuntimeError("the merge failed mid-write")
    assert target.read_bytes() == b"old"
    with pytest.raises(KeyboardInterrupt), atomic_path(tmp_path / "t.parquet") as temp:
        temp.write_bytes(b"x")
        raise KeyboardInterrupt
    assert not (tmp_path / "t.parquet").exists()
    _no_temp_files(tmp_path)


def test_merge_error_mid_copy_leaves_nothing(sample_t39, tmp_path):
    # a Proton file cut in the middle: the merge fails after the host copy began writing
    import gzip

    raw = gzip.decompress((sample_t39 / "sample-TP0.proton.chrome_trace.gz").read_bytes())
    (tmp_path / "s-TP0.proton.chrome_trace").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "s-TP0.viztracer.json.gz").write_bytes((sample_t39 / "sample-TP0.viztracer.json.gz").read_bytes())
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["merge", str(tmp_path), "-o", str(out)])
    assert result.exit_code == 1 and "ends early" in result.output
    assert not out.exists() or not any(out.iterdir())


def test_an_output_folder_that_is_a_file_is_one_line(tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_bytes(b"")
    with pytest.raises(InputError, match="not_a_folder/x.json: cannot write"):
        write_bytes(blocker / "x.json", b"{}")
    _no_temp_files(tmp_path)
