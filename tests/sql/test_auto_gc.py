"""Automatic garbage collection from VizTracer's own events (`log_gc`, issue 45): a real H100
run of examples/serve_engine.py (tests/data/autogc_kineto, README there) whose scheduler allocates
until Python's collector runs a full collection by itself, over 2M live objects: no gc.collect
call anywhere. The collector's pause is `gc`, named by the frame it stopped, `gc (automatic)`;
without the gc events the same gap is `busy` there."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest

from support.analysis_fixtures import run_analyze
from support.paths import DATA

pytestmark = pytest.mark.slow  # a real trace

RUN = DATA / "autogc_kineto"


def _truth():
    with gzip.open(RUN / "agc-TP0.truth.json.gz") as f:
        return json.load(f)["stalls"]


def _cause_of(causes, stall):
    start, end = stall["start_ns"], stall["end_ns"]
    overlap = ((causes.unix_ts + causes.dur).clip(upper=end) - causes.unix_ts.clip(lower=start)).clip(lower=0)
    return causes.loc[overlap.idxmax()], overlap.max() / (end - start)


def test_an_automatic_collection_is_gc_in_the_frame_it_stopped(tmp_path):
    run = run_analyze(RUN, tmp_path / "out", "--no-plots")
    assert run.exit_code == 0, run.stdout
    causes = pd.read_parquet(run.output / "tables" / "gap_causes.parquet")
    stalls = _truth()
    assert [s["kind"] for s in stalls] == ["autogc", "sleep"]
    gc_stall, sleep_stall = stalls
    row, covered = _cause_of(causes, gc_stall)
    assert covered > 0.9 and row.is_stall == 1
    assert (row.cause_kind, row.cause_function, row.cause_call) == ("gc", "cache_responses", "gc (automatic)")
    (pause_start, pause_end), = gc_stall["gc_pauses"]  # gc.callbacks in the workload, unix ns
    assert row.cause_ns == pytest.approx(pause_end - pause_start, rel=0.05)
    row, _ = _cause_of(causes, sleep_stall)
    assert (row.cause_kind, row.cause_function) == ("blocking", "flush_request_log")
    assert "top stall cause cache_responses (serve_engine.py:246) (gc in gc (automatic))" in run.stdout


def test_without_the_collectors_events_the_pause_is_busy(tmp_path):
    folder = tmp_path / "no_log_gc"
    folder.mkdir()
    for path in RUN.glob("agc-TP0.*"):
        with gzip.open(path) as f:
            doc = json.load(f)
        if path.name.endswith(".viztracer.json.gz"):
            doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") != "C"]
        with gzip.open(folder / path.name, "wt") as f:
            json.dump(doc, f)
    run = run_analyze(folder, tmp_path / "out", "--no-plots")
    assert run.exit_code == 0, run.stdout
    causes = pd.read_parquet(run.output / "tables" / "gap_causes.parquet")
    row, _ = _cause_of(causes, _truth()[0])
    assert (row.cause_kind, row.cause_function) == ("busy", "cache_responses")
