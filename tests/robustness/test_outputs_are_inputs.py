"""Issue 13, item 1: an output that is an input (same path, hard link, symbolic link either way)
is refused before any work: one ``error:`` line, exit 1, the input untouched."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from support.hostile import one_error_line, sample_rank
from tokentrace.cli import app

RUNNER = CliRunner()


def _run(*args) -> tuple[int, str]:
    result = RUNNER.invoke(app, [str(a) for a in args])
    return result.exit_code, result.stderr.strip()


@pytest.fixture()
def rank(tmp_path):
    viz, proton = sample_rank(tmp_path / "in")
    return viz, proton, {p: p.read_bytes() for p in (viz, proton)}


def _untouched(saved: dict) -> None:
    for path, data in saved.items():
        assert path.read_bytes() == data, f"{path} was changed"


@pytest.mark.parametrize("how", ["same", "hardlink", "symlink_out", "symlink_in"])
def test_merge_refuses_an_output_that_is_an_input(rank, tmp_path, how):
    viz, proton, saved = rank
    inputs, out = [viz, proton], viz
    if how == "hardlink":
        out = tmp_path / "out.json"
        os.link(viz, out)
        saved[out] = viz.read_bytes()
    elif how == "symlink_out":
        out = tmp_path / "out.json"
        out.symlink_to(viz)
    elif how == "symlink_in":
        link = tmp_path / "link.viztracer.json"
        link.symlink_to(viz)
        inputs = [link, proton]
    code, err = _run("merge", *inputs, "-o", out)
    one_error_line(code, err, "would replace the input", "choose another output")
    _untouched(saved)


def test_merge_refuses_an_output_folder_that_is_a_file(rank):
    viz, proton, saved = rank
    # no .json suffix: -o names a folder, and this one is the Proton input
    one_error_line(*_run("merge", viz, proton, "-o", proton), "is a file", ".json")
    _untouched(saved)


def test_merge_refuses_an_output_file_name_that_is_a_folder(rank, tmp_path):
    viz, proton, saved = rank
    (tmp_path / "x.json").mkdir()
    one_error_line(*_run("merge", viz, proton, "-o", tmp_path / "x.json"), "x.json", "a folder has that name")
    assert not any((tmp_path / "x.json").iterdir())
    _untouched(saved)


def test_query_refuses_to_write_over_its_trace(tmp_path, sample_t39):
    trace = tmp_path / "t.json"
    assert _run("merge", sample_t39, "--combine", "-o", trace)[0] == 0
    before = trace.read_bytes()
    one_error_line(*_run("query", "kernel_summary", trace, "-o", trace), "would replace the input")
    link = tmp_path / "k.json"
    link.symlink_to(trace)
    one_error_line(*_run("query", "kernel_summary", trace, "-o", link), "through a link")
    assert trace.read_bytes() == before


def test_analyze_refuses_an_input_among_its_outputs(tmp_path):
    viz, proton = sample_rank(tmp_path / "in")
    out = tmp_path / "out"
    (out / "tables").mkdir(parents=True)
    os.link(viz, out / "tables" / "kernel_summary.parquet")  # an input where a table goes
    before = viz.read_bytes()
    one_error_line(*_run("analyze", tmp_path / "in", "-o", out), "would replace the input")
    assert viz.read_bytes() == before
