"""The recording's pieces that run without a GPU, for real: VizTracer with tokentrace's settings
(every thread, C calls, GC pauses, the clock anchor), the file names discovery reads, the rank,
the options' checks, and a termination that still runs the ``finally`` that writes the files."""

from __future__ import annotations

import gc
import importlib.util
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tokentrace.errors import TokentraceWarning
from tokentrace.record import RecordError, record, step
from tokentrace.record.host import HostTrace
from tokentrace.record.names import RankPaths, current_rank, rank_paths
from tokentrace.record.options import RecordOptions, check_values
from tokentrace.sources.discover import parse_name


def _busy_thread() -> None:
    sorted(range(1000))
    time.sleep(0.005)


def test_viztracer_records_every_thread_c_calls_gc_and_the_anchor(tmp_path):
    host = HostTrace(tmp_path / "run1-TP0.viztracer.json", 100_000)
    host.start()
    worker = threading.Thread(target=_busy_thread)
    worker.start()
    worker.join()
    gc.collect()
    host.stop()
    report = json.loads(host.save().read_text())
    assert isinstance(report["viztracer_metadata"]["baseTimeNanoseconds"], int)
    calls = [e for e in report["traceEvents"] if e["ph"] == "X"]
    assert {"builtins.sorted", "time.sleep", "gc.collect"} <= {e["name"] for e in calls}  # C calls
    assert len({e["tid"] for e in calls}) == 2  # this thread and the worker
    pauses = [e for e in report["traceEvents"] if e["name"] == "garbage collection"]
    assert [e["args"]["collecting"] for e in pauses] == [1, 0]  # log_gc: the collector's pause


def test_a_wrapped_buffer_is_a_warning_that_says_what_to_do(tmp_path):
    host = HostTrace(tmp_path / "run1-TP0.viztracer.json", 1000)
    host.start()
    for _ in range(2000):
        len("x")
    host.stop()
    with pytest.warns(TokentraceWarning, match="wrapped.*raise tracer_entries"):
        host.save()


@pytest.mark.parametrize("gpu, kind", [("torch", "kineto"), ("proton", "proton")])
def test_the_names_are_the_ones_discovery_reads(tmp_path, gpu, kind):
    paths = RankPaths(3, tmp_path / "eng-run-TP3", gpu)
    host, trace = parse_name(paths.host), parse_name(paths.gpu_trace)
    assert (host.kind, trace.kind) == ("viztracer", kind)
    assert {host.profile_id, trace.profile_id} == {"eng-run"} and {str(host.tag), str(trace.tag)} == {"TP3"}


def test_the_folder_is_made_and_an_earlier_recording_is_not_overwritten(tmp_path):
    options = RecordOptions(tmp_path / "a" / "run1")
    paths = rank_paths(options, 0)
    assert paths.base.parent.is_dir() and paths.host.name == "run1-TP0.viztracer.json"
    paths.host.write_text("{}")
    with pytest.raises(RecordError, match="already holds rank 0's files.*run1-TP0.viztracer.json"):
        rank_paths(options, 0)
    assert rank_paths(options, 1).rank == 1  # another rank's files do not stand in the way


def test_the_rank_is_the_given_one_else_the_launchers(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    assert current_rank(None) == 0
    monkeypatch.setenv("RANK", "5")
    assert (current_rank(None), current_rank(2)) == (5, 2)


@pytest.mark.parametrize("field, value", [("skip", -1), ("steps", 0), ("rank", -2), ("tracer_entries", 10),
                                          ("gpu", "nsys"), ("profile_id", ".hidden")])
def test_values_out_of_range_are_refused_before_anything_starts(tmp_path, field, value):
    with pytest.raises(RecordError):
        check_values(RecordOptions(tmp_path, **{field: value}))
    with pytest.raises(RecordError), record(tmp_path / "run1", **{field: value}):
        pass
    assert not (tmp_path / "run1").exists()


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_recording_with_torch_missing_is_one_line_naming_the_package(tmp_path):
    with pytest.raises(RecordError) as raised, record(tmp_path / "run1", gpu="torch"):
        pass
    assert "\n" not in str(raised.value) and "pip install torch" in str(raised.value)


def test_a_step_mark_outside_a_recording_does_nothing():
    step()


def test_a_termination_runs_the_finally_blocks(tmp_path):
    code = ("import os, signal, sys\n"
            "from tokentrace.runtime.child import terminations_exit\n"
            "with terminations_exit():\n"
            "    try:\n"
            "        os.kill(os.getpid(), signal.SIGTERM)\n"
            "        import time; time.sleep(5)\n"
            "    finally:\n"
            "        open(sys.argv[1], 'w').close()\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "written")], capture_output=True, timeout=60)
    assert done.returncode == 128 + 15 and Path(tmp_path / "written").exists(), done.stderr
