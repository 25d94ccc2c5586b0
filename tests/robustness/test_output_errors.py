"""Issue 13, items 3 and 6: what went wrong at the output edge, or in an option, is one line
(path or option, reason, what to do) and exit 1, found before any merge work where it can be;
never a traceback, never a temp file left."""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import uuid

import pytest
from typer.testing import CliRunner

from support.hostile import one_error_line, run_cli, sample_rank
from tokentrace.cli import app

RUNNER = CliRunner()


def _run(*args) -> tuple[int, str]:
    result = RUNNER.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stderr.strip()


def _no_temp(folder) -> None:
    assert not [p for p in folder.rglob("*") if p.name.endswith((".tmp", ".old"))]


@pytest.fixture()
def rank(tmp_path):
    return sample_rank(tmp_path / "in")


def _file_size_limit(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.mark.parametrize("name", ["out.json", "out.json.gz"])
def test_a_file_size_limit_is_one_line(rank, tmp_path, name):
    viz, proton = rank
    out = tmp_path / "out" / name
    code, err = run_cli("merge", viz, proton, "-o", out, preexec_fn=_file_size_limit(1 << 20))
    one_error_line(code, err, str(out), "File too large", "ulimit -f")
    _no_temp(tmp_path)
    assert not out.exists()


def test_a_query_over_the_file_size_limit_is_one_line(tmp_path, sample_t39):
    trace = tmp_path / "t.json"
    assert _run("merge", sample_t39, "--combine", "-o", trace)[0] == 0
    out = tmp_path / "k.csv"
    code, err = run_cli("query", "host_stalls", trace, "-o", out, preexec_fn=_file_size_limit(1000))
    one_error_line(code, err, str(out), "cannot write")
    _no_temp(tmp_path)


@pytest.fixture()
def full_disk(tmp_path):
    """A 2 MiB tmpfs (root only; skipped elsewhere)."""
    folder = tmp_path / f"full-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    yield folder
    with contextlib.suppress(Exception):
        subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.parametrize("name", ["out.json", "out.json.gz"])
def test_a_full_disk_is_one_line(rank, full_disk, name):
    viz, proton = rank
    code, err = _run("merge", viz, proton, "-o", full_disk / name)
    one_error_line(code, err, str(full_disk / name), "No space left on device", "free some space")
    assert list(full_disk.iterdir()) == []


def test_analyze_output_layout_is_checked_first(tmp_path, sample_t39):
    out = tmp_path / "a"
    out.mkdir()
    (out / "plots").write_text("not a folder")
    one_error_line(*_run("analyze", sample_t39, "-o", out), "plots: is a file", "choose another -o")
    (out / "plots").unlink()
    (out / "report.html").mkdir()
    one_error_line(*_run("analyze", sample_t39, "-o", out), "report.html: is a folder")
    blocker = tmp_path / "file"
    blocker.write_text("")
    one_error_line(*_run("analyze", sample_t39, "-o", blocker), "is a file; -o names the output folder")
    assert sorted(p.name for p in out.iterdir()) == ["report.html"]  # no merge ran


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e30"])
def test_offset_us_must_be_finite(rank, tmp_path, value, sample_t39):
    viz, proton = rank
    one_error_line(*_run("merge", viz, proton, "-o", tmp_path / "o.json", "--offset-us", value),
                   "--offset-us", "finite number of µs")
    one_error_line(*_run("analyze", sample_t39, "-o", tmp_path / "a", "--offset-us", value), "--offset-us")
    assert not (tmp_path / "o.json").exists() and not (tmp_path / "a").exists()


@pytest.mark.parametrize("flag", ["--stall-min-us", "--min-gap-us", "--launch-overhead-us"])
def test_query_thresholds_are_checked_before_the_merge(tmp_path, sample_t39, flag):
    one_error_line(*_run("analyze", sample_t39, "-o", tmp_path / "a", flag, "inf"), flag, "finite")
    assert not (tmp_path / "a").exists()  # before: a full merge, then 'infus'


def test_a_bad_wasm_is_one_line(tmp_path, sample_t39):
    text = tmp_path / "x.wasm"
    text.write_text("root:x:0:0:root:/root:/bin/bash\n")
    one_error_line(*_run("analyze", sample_t39, "-o", tmp_path / "a", "--wasm", text), "not a WebAssembly module")
    one_error_line(*_run("analyze", sample_t39, "-o", tmp_path / "a", "--wasm", tmp_path / "nope.wasm"), "no such file")
    one_error_line(*_run("query", "kernel_summary", sample_t39 / "sample-TP0.proton.chrome_trace.gz", "--wasm", text),
                   "not a WebAssembly module")
    assert not (tmp_path / "a").exists()


def test_analyze_of_a_file_names_it(tmp_path, sample_t39):
    trace = sample_t39 / "sample-TP0.viztracer.json.gz"
    one_error_line(*_run("analyze", trace, "-o", tmp_path / "a"), str(trace), "a VizTracer report",
                   "takes a profile folder, a merged trace or a torch-profiler trace")
    one_error_line(*_run("analyze", tmp_path / "nope", "-o", tmp_path / "a"), "nope", "no such profile folder")
