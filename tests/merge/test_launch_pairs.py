"""A torch-profiler trace's launch arrows are kept as (call, activity) pairs and laid out without
flow events (:func:`tokentrace.merge.flows.pair_layout`): the rank's output is byte for byte what
the arrows made as ``s``/``f`` events give, on real traces of other projects (tests/data/peers:
arrows that stay event pairs among them) and on hand-made edge cases where the layout cannot be
told without the events (an arrow start on no slice of its sub-lane for certain, a sub-lane that
an arrow's left-out event would have named first)."""

from __future__ import annotations

import dataclasses
import json

import pytest

import tokentrace.merge.gpu_events as gpu_events
from support.paths import DATA
from tokentrace.merge.gpu_events import build_rows
from tokentrace.merge.ids import IdAllocator
from tokentrace.sources.kineto import read_kineto
from tokentrace.sources.kineto_links import with_arrows

# every peer copy but the two that are no GPU trace (a CPU-only trace, an execution trace)
PEERS = sorted(p for p in (DATA / "peers").glob("*.json.gz")
               if not p.name.startswith(("hta__cpu_only", "hta__execution_trace")))


def _output(trace) -> bytes:
    rows = build_rows(trace, flow_base=1)
    out = rows.serialise(0, IdAllocator(set()))
    head = (rows.n_flows, rows.n_extra_lanes, [t.name for t in rows.threads], rows.scope_ids)
    return json.dumps(head).encode() + b"".join(bytes(piece) for piece in out.events)


def _as_events(trace):
    """The trace with its arrows made as flow events, laid out the general way."""
    return dataclasses.replace(trace, events=with_arrows(trace.events, trace.launch_pairs), launch_pairs=())


@pytest.fixture
def layouts(monkeypatch):
    """What each ``pair_layout`` call gave: None (the general way taken) or the layout."""
    found = []

    def recorded(*args):
        found.append(layout := pair_layout(*args))
        return layout

    pair_layout = gpu_events.pair_layout
    monkeypatch.setattr(gpu_events, "pair_layout", recorded)
    return found


@pytest.mark.parametrize("path", PEERS, ids=[p.name[:40] for p in PEERS])
def test_a_rank_is_written_the_same_from_pairs_as_from_flow_events(path, layouts):
    trace = read_kineto(path).gpu
    assert trace.launch_pairs
    assert _output(trace) == _output(_as_events(trace))
    assert layouts[0] is not None  # laid out from the pairs
    kept = len(layouts[0].events) - len(trace.events)
    if path.name.startswith("hta__critical_path"):
        assert kept == 2  # one arrow whose start shares its call's time with a shorter slice


def _trace(tmp_path, events):
    path = tmp_path / "edge.pt.trace.json"
    base = [{"ph": "X", "cat": "kernel", "name": "warm", "pid": 0, "tid": 7, "ts": 1, "dur": 1}]
    path.write_text(json.dumps({"traceEvents": base + events, "baseTimeNanoseconds": 1_000_000_000}))
    return read_kineto(path).gpu


_CALL = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 5, "tid": 5, "ts": 15, "dur": 10,
         "args": {"correlation": 1}}
_KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 30, "dur": 5, "args": {"correlation": 1}}
_OP = {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 5, "tid": 5, "ts": 10, "dur": 10}
_INNER = {"ph": "X", "cat": "cpu_op", "name": "inner", "pid": 5, "tid": 5, "ts": 15, "dur": 3}
EDGES = {
    # the call starts inside an op and ends after it: a sub-lane of its own, and no slice at its
    # start on the first, where its arrow starts
    "an arrow start on no certain slice": [_OP, _CALL, _KERNEL],
    # the call (second sub-lane) comes first in the file; its arrow starts on the first
    # sub-lane, which the file names only after the kernel's lane: the left-out flow event
    # would have named it before
    "a sub-lane a left-out event names first": [_CALL, _KERNEL, _OP, _INNER],
}


@pytest.mark.parametrize("events", list(EDGES.values()), ids=list(EDGES))
def test_what_pairs_cannot_tell_is_laid_out_from_flow_events(tmp_path, layouts, events):
    trace = _trace(tmp_path, events)
    assert trace.launch_pairs
    assert _output(trace) == _output(_as_events(trace))
    assert layouts[0] is None


def test_arrows_that_stay_event_pairs_keep_their_places(tmp_path, layouts):
    # a graph launch of no duration (no slice to bind a v2 flow to for certain) replaying two
    # kernels that overlap on one stream (the second on a sub-lane of its own): both arrows stay
    # s/f events, the call's two starts in pair order, each finish on its kernel's sub-lane
    trace = _trace(tmp_path, [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 5, "tid": 5, "ts": 15, "dur": 0,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 30, "dur": 10, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 35, "dur": 10, "args": {"correlation": 1}},
    ])
    assert len(trace.launch_pairs) == 2
    assert _output(trace) == _output(_as_events(trace))
    assert [(e.ph, e.flow_pair) for e in layouts[0].events if e.ph in "sf"] == [("s", 0), ("s", 1), ("f", 0), ("f", 1)]
    assert [k for e, k in zip(layouts[0].events, layouts[0].lanes) if e.ph == "f"] == [1, 2]
