"""A torch-profiler-only rank's host events (its ``python_function`` calls) are written the same
wherever they are built: by a forked child beside the GPU side's layout (a plain output), in this
process (no fork, or a gzip output); a failing child leaves no output; and the outline the merge
reads before the host is built (threads, earliest start) is the built host's own. Real traces
from other projects (tests/data/peers: TraceLens's B200 eager trace and SGLang decode trace)."""

from __future__ import annotations

import gzip

import pytest

import tokentrace.merge.kineto_alone as kineto_alone
from support.paths import DATA
from tokentrace.errors import TokentraceError
from tokentrace.merge.kineto_alone import merge_kineto_alone
from tokentrace.runtime.processes import ForkedCall, can_fork
from tokentrace.sources.discover import RankFiles
from tokentrace.sources.kineto import read_kineto
from tokentrace.sources.kineto_host import host_from_python, outline
from tokentrace.sources.profile import find_profile

TRACES = [DATA / "peers" / "step_tracelens__b200__eager_trace.json.gz",
          DATA / "peers" / "tracelens__sglang_decode__sglang_Qwen3-8B_decode.json.gz"]
IDS = ["b200 eager", "sglang decode"]


def _files(trace) -> RankFiles:
    (files,) = find_profile([trace], None).ranks
    assert files.viztracer is None  # a torch-profiler trace alone
    return files


class _CountedFork(ForkedCall):
    made = 0

    def __init__(self, *args, **kwargs) -> None:
        type(self).made += 1
        super().__init__(*args, **kwargs)


@pytest.mark.parametrize("trace", TRACES, ids=IDS)
def test_the_host_events_are_the_same_written_by_a_child_or_here(tmp_path, monkeypatch, trace):
    if not can_fork():
        pytest.skip("no fork here")
    monkeypatch.setattr(kineto_alone, "ForkedCall", _CountedFork)
    _CountedFork.made = 0
    forked = merge_kineto_alone(_files(trace), tmp_path / "forked.json", False, [])
    assert _CountedFork.made == 1  # the child wrote them
    merge_kineto_alone(_files(trace), tmp_path / "packed.json.gz", True, [])  # no file offset to share
    monkeypatch.setattr(kineto_alone, "can_fork", lambda: False)
    here = merge_kineto_alone(_files(trace), tmp_path / "here.json", False, [])
    assert _CountedFork.made == 1  # neither of these forked
    data = (tmp_path / "forked.json").read_bytes()
    assert b'"cat":"python_function"' in data
    assert data == (tmp_path / "here.json").read_bytes()
    assert data == gzip.decompress((tmp_path / "packed.json.gz").read_bytes())
    assert forked.record() | {"output": None} == here.record() | {"output": None}


def test_a_child_that_fails_leaves_no_output(tmp_path, monkeypatch):
    if not can_fork():
        pytest.skip("no fork here")

    def broken(*_args):
        raise RuntimeError("the host could not be written")

    monkeypatch.setattr(kineto_alone, "_write_host", broken)  # the child runs this process's copy
    with pytest.raises((RuntimeError, TokentraceError), match="could not be written"):
        merge_kineto_alone(_files(TRACES[0]), tmp_path / "out.json", False, [])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("trace", TRACES, ids=IDS)
def test_the_outline_is_the_built_hosts_own(trace):
    read = read_kineto(trace, python_apart=True)
    host = host_from_python(read.python, read.host_pid, read.thread_names)
    told = outline(read.python, read.host_pid)
    assert host.names  # the trace has Python calls
    assert told.tids == set(host.tids)
    assert told.first_ts_ns == host.first_ts_ns
    assert outline(read.python, read.host_pid + 1).first_ts_ns is None  # another process: none
