"""``tokentrace merge`` through the command line: bad inputs give one line and exit 1."""

from __future__ import annotations

import gzip
import os
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokentrace.cli.app import app

RUNNER = CliRunner()


def run_merge(*args) -> tuple[int, str]:
    result = RUNNER.invoke(app, ["merge", *map(str, args)])
    return result.exit_code, result.stderr.strip()


@pytest.fixture()
def rank0(tmp_path, sample_t39) -> tuple[Path, Path]:
    """Copies of a real rank 0 pair, decompressed, ten seconds old."""
    viz, proton = tmp_path / "s-TP0.viztracer.json", tmp_path / "s-TP0.proton.chrome_trace"
    for src, dst in ((sample_t39 / "sample-TP0.viztracer.json.gz", viz), (sample_t39 / "sample-TP0.proton.chrome_trace.gz", proton)):
        dst.write_bytes(gzip.decompress(src.read_bytes()))
        _age(dst)
    return viz, proton


def _age(path: Path, seconds: float = 10.0) -> None:
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))


def _expect(code_and_err, *fragments):
    code, err = code_and_err
    assert code == 1, err
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    for fragment in fragments:
        assert fragment in err, err


def test_sample_folder_merges(tmp_path, sample_t39):
    code, _ = run_merge(sample_t39, "-o", tmp_path)
    assert code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sample-TP0.merged.json", "sample-TP1.merged.json"]


def test_not_json(rank0, tmp_path):
    viz, proton = rank0
    proton.write_text("hello, this is not a trace\n")
    _age(proton)
    _expect(run_merge(viz, proton, "-o", tmp_path / "out.json"), str(proton), "not valid JSON")


def test_truncated_json(rank0, tmp_path):
    viz, proton = rank0
    proton.write_bytes(proton.read_bytes()[:-5000])
    _age(proton)
    _expect(run_merge(viz, proton, "-o", tmp_path / "out.json"), str(proton), "truncated")


def test_truncated_viztracer(rank0, tmp_path):
    viz, proton = rank0
    viz.write_bytes(viz.read_bytes()[: 3_000_000])
    _age(viz)
    _expect(run_merge(viz, proton, "-o", tmp_path / "out.json"), str(viz), "truncated")
    assert not (tmp_path / "out.json").exists()


def test_file_still_being_written(rank0, tmp_path):
    viz, proton = rank0
    viz.write_bytes(viz.read_bytes()[: 3_000_000])  # fresh mtime: the profiler is still writing
    _expect(run_merge(viz, proton, "-o", tmp_path / "out.json"), str(viz), "still being written", "wait")


def test_proton_where_viztracer_expected(rank0, tmp_path):
    viz, proton = rank0
    shutil.copy(proton, viz)
    _expect(run_merge(tmp_path, "-o", tmp_path / "o"), str(viz), "is a Proton chrome trace", "VizTracer report was expected")


def test_viztracer_where_proton_expected(rank0, tmp_path):
    viz, proton = rank0
    shutil.copy(viz, proton)
    _expect(run_merge(tmp_path, "-o", tmp_path / "o"), str(proton), "is a VizTracer report", "Proton chrome trace was expected")


def test_empty_proton_trace(rank0, tmp_path):
    viz, proton = rank0
    proton.write_text('{"displayTimeUnit": "us", "traceEvents": []}')
    _expect(run_merge(viz, proton, "-o", tmp_path / "out.json"), str(proton), "no kernel or scope events")


def test_empty_file(rank0, tmp_path):
    viz, proton = rank0
    proton.write_text("")
    _age(proton)
    _expect(run_merge(tmp_path, "-o", tmp_path / "o"), str(proton), "is empty")


def test_proton_hatchet_file(rank0, tmp_path):
    viz, proton = rank0
    proton.write_text('[{"children": [], "frame": {"name": "ROOT", "type": "function"}, "metrics": {"time (ns)": 5}}]')
    _expect(run_merge(tmp_path, "-o", tmp_path / "o"), str(proton), "hatchet", 'data="trace"')


def test_missing_file(rank0, tmp_path):
    viz, _ = rank0
    _expect(run_merge(viz, tmp_path / "nope.chrome_trace", "-o", tmp_path / "out.json"), "nope.chrome_trace", "no such file")


def test_several_profile_ids(rank0, tmp_path):
    viz, proton = rank0
    shutil.copy(viz, tmp_path / "t-TP0.viztracer.json")
    shutil.copy(proton, tmp_path / "t-TP0.proton.chrome_trace")
    _expect(run_merge(tmp_path), "several profile ids (s, t)", "--profile-id")
    code, _ = run_merge(tmp_path, "--profile-id", "t", "-o", tmp_path / "o")
    assert code == 0


def test_unpaired_file(rank0, tmp_path):
    viz, _ = rank0
    shutil.copy(viz, tmp_path / "s-TP1.viztracer.json")
    _expect(run_merge(tmp_path), "s-TP1.viztracer.json", "no Proton file for rank TP1")


def test_two_files_claim_one_rank(rank0, tmp_path):
    viz, _ = rank0
    shutil.copy(viz, tmp_path / "s-TP-0.viztracer.json")
    _expect(run_merge(tmp_path), "two VizTracer files claim rank TP0")


def test_missing_anchor_is_pointed(sample_t36, tmp_path):
    _expect(run_merge(sample_t36, "--align", "anchors", "-o", tmp_path),
            "sample-TP0.proton.chrome_trace.gz has no clock anchor", "triton <= 3.8", "--offset-us")
    code, _ = run_merge(sample_t36, "--align", "anchors", "--offset-us", "150926783.883", "-o", tmp_path)
    assert code == 0
