"""CUDA-graph replays as alignment evidence: host replay calls and the kernels they enqueued.

Under CUDA graphs the kernels of a replay have no launch call of their own: one replay call
(``torch._C.replay`` inside ``CUDAGraph.replay``; ``cudaGraphLaunch`` where a runtime call is
traced) enqueues them all. So the k-th replay call began before the first kernel of the k-th
replay on each stream started (a lower bound on the offset), and every kernel of a replay whose
call returned before a GPU wait began was enqueued before that wait (an upper bound through
:func:`~tokentrace.align.bounds.wait_bounds`).

The GPU side is told from the trace: Proton marks each kernel that ran in a replay
(:func:`~tokentrace.sources.proton.in_graph`); the replays of a stream are its maximal runs of
such kernels, in start order. Two replays back to back on a stream with no other kernel between
make one run; then the run counts differ from the call counts and the alignments near
first-with-first and last-with-last are all tried, as for Triton launches.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tokentrace.align.bounds import KernelIndex, Matching
from tokentrace.sources.fileio import feed_event_ranges, iter_chunks
from tokentrace.sources.host_calls import HostCall, needle_positions
from tokentrace.units import us_to_ns

# The calls that launch a whole graph, as VizTracer names them: the C call of torch's
# CUDAGraph.replay, the Python frame around it (named with its file and line), the runtime call.
REPLAY_C_CALLS = ("torch._C.replay", "cudaGraphLaunch")
REPLAY_FRAME_PREFIX = "CUDAGraph.replay ("
# Each with the index of its capital G, a letter rare in VizTracer reports (hundreds in a 55 MB
# report, measured on t39_tp2 and engine_mixed), -1 without one (see
# :func:`~tokentrace.sources.host_calls.needle_positions`): memchr on it skips most of the bytes a
# word search compares.
_NEEDLES = tuple((needle, needle.find(b"G")) for needle in (b'"torch._C.replay"', b'"cudaGraphLaunch"',
                                                           b'"CUDAGraph.replay ('))
_PH = re.compile(rb'"ph"\s*:\s*"([A-Za-z])"')
_TS = re.compile(rb'"ts"\s*:\s*(-?[0-9][0-9.eE+-]*)')
_DUR = re.compile(rb'"dur"\s*:\s*(-?[0-9][0-9.eE+-]*)')
_NAME = re.compile(rb'"name"\s*:\s*"([^"]*)"')
# How long before its replay call returns a graph's first kernel may start. Measured on
# compile_kineto (H200, CUDA 12, torch 2.11; runtime calls and kernels on one clock):
# cudaGraphLaunch submits the graph as it returns (first kernel 15.6 us before its end at the
# earliest, 2.6 us after it in the median, over 159 replays), and torch._C.replay returns 3-5 us
# after it. Three times the worst seen.
GRAPH_SUBMIT_SLACK_NS = 50_000
# Alignments tried around first-with-first and last-with-last when run and call counts differ.
SHIFT_WINDOW = 2


def read_replay_calls(viz_path: Path) -> tuple[HostCall, ...]:
    """The graph replay calls of a VizTracer report, sorted by begin, read by streaming.

    Nested calls of one replay (the ``CUDAGraph.replay`` frame around ``torch._C.replay``)
    count once, as the innermost: it began last, so its bound is the tightest.
    """
    found: list[HostCall] = []

    def feed(data: bytes, start: int, end: int) -> None:
        for needle, rare in _NEEDLES:
            for pos in needle_positions(data, needle, rare, start, end):
                call = _call_at(data, start, end, pos)
                if call is not None:
                    found.append(call)

    feed_event_ranges(iter_chunks(viz_path), feed)
    return innermost(found)


def _call_at(data: bytes, lo: int, hi: int, pos: int) -> HostCall | None:
    """The complete event whose name starts at ``pos`` (from the ``{`` before it to the first
    brace after it: VizTracer writes its scalar fields before any ``args``)."""
    start = data.rfind(b"{", lo, pos)
    stops = [p for p in (data.find(b"}", pos, hi), data.find(b"{", pos, hi)) if p >= 0]
    event = data[start + 1:min(stops) if stops else hi] if start >= 0 else b""
    name, phase = _NAME.search(event), _PH.search(event)
    ts, dur = _TS.search(event), _DUR.search(event)
    if name is None or phase is None or phase.group(1) != b"X" or ts is None or dur is None:
        return None
    text = name.group(1).decode("utf-8", "replace")
    if text not in REPLAY_C_CALLS and not text.startswith(REPLAY_FRAME_PREFIX):
        return None  # the needle was the value of another key
    begin = _ns(ts.group(1))
    return HostCall(text, begin, begin + _ns(dur.group(1)))


def _ns(text: bytes) -> int:
    value = text.decode()
    return us_to_ns(float(value)) if "e" in value or "E" in value else us_to_ns(value)


def innermost(calls: list[HostCall]) -> tuple[HostCall, ...]:
    """The calls, sorted by begin, without those that contain another (the same replay)."""
    calls = sorted(set(calls), key=lambda c: (c.begin_ns, -c.end_ns))
    kept: list[HostCall] = []
    for call in calls:
        while kept and kept[-1].begin_ns <= call.begin_ns and call.end_ns <= kept[-1].end_ns:
            kept.pop()  # an outer call of the same replay
        kept.append(call)
    return tuple(kept)


@dataclass(frozen=True)
class GraphRuns:
    """The replays seen on the GPU: per stream, ``(first, last)`` kernel positions of each run
    of graph kernels (positions into the :class:`KernelIndex`), in start order."""

    by_stream: dict

    @property
    def count(self) -> int:
        """Runs on the stream that has the most."""
        return max((len(runs) for runs in self.by_stream.values()), default=0)


def graph_runs(index: KernelIndex) -> GraphRuns:
    """The runs of graph kernels per stream (none when the trace does not tell graph kernels)."""
    if index.in_graph is None or not any(index.in_graph):
        return GraphRuns({})
    by_stream: dict = {}
    for stream, members in index.by_stream.items():
        runs: list[tuple[int, int]] = []
        previous_in_graph = False
        for position in members:
            if index.in_graph[position]:
                if previous_in_graph:
                    runs[-1] = (runs[-1][0], position)
                else:
                    runs.append((position, position))
            previous_in_graph = index.in_graph[position]
        if runs:
            by_stream[stream] = [piece for run in runs for piece in _replays_in(run, members, index)]
    return GraphRuns(by_stream)


def _replays_in(run: tuple[int, int], members: list[int], index: KernelIndex) -> list[tuple[int, int]]:
    """Splits a run of graph kernels into the replays it holds: a graph replays the same kernel
    sequence each time, so replays back to back (no other kernel between them on the stream)
    make a run whose names repeat with the graph's length as their smallest period. The run is
    cut every period from its start (the last piece may be cut short by the trace's end)."""
    first, last = index.rank_in_stream[run[0]], index.rank_in_stream[run[1]]
    names = [index.names[p] for p in members[first:last + 1]]
    period = _smallest_period(names)
    if period == len(names):
        return [run]
    return [(members[first + i], members[min(first + i + period, last + 1) - 1])
            for i in range(0, len(names), period)]


def _smallest_period(names: list[str]) -> int:
    """The smallest ``p`` with ``names[i] == names[i + p]`` for every ``i`` (prefix function)."""
    border = [0] * len(names)
    for i in range(1, len(names)):
        k = border[i - 1]
        while k and names[i] != names[k]:
            k = border[k - 1]
        border[i] = k + 1 if names[i] == names[k] else k
    return len(names) - border[-1] if names else 0


def replay_matchings(calls: tuple[HostCall, ...], runs: GraphRuns) -> Iterator[Matching]:
    """The replay calls paired with the runs of each stream, one :class:`Matching` per
    alignment tried (``shift``: call ``i`` <-> run ``i + shift`` on every stream); the most
    plausible first (the counts equal: both ends together)."""
    if not calls or not runs.by_stream:
        return
    count = runs.count
    ends = count - len(calls)
    # streams with fewer runs (a graph forking onto them now and then) cannot be paired one to one
    streams = [stream_runs for stream_runs in runs.by_stream.values() if len(stream_runs) == count]
    shifts = {base + d for base in (0, ends) for d in range(-SHIFT_WINDOW, SHIFT_WINDOW + 1)}
    for shift in sorted(shifts, key=lambda s: (abs(s - ends), s)):
        pairs = [(calls[i], stream_runs[i + shift]) for stream_runs in streams
                 for i in range(len(calls)) if 0 <= i + shift < count]
        if pairs:
            pairs.sort(key=lambda pair: (pair[0].begin_ns, pair[1][0]))
            yield Matching(tuple(c for c, _ in pairs), tuple(r[1] for _, r in pairs), shift,
                           tuple(r[0] for _, r in pairs))


def submitted_bound(matching: Matching, index: KernelIndex) -> tuple[int, HostCall] | None:
    """The lower bound that the graphs' submission gives: a replay's first kernel starts no
    earlier than :data:`GRAPH_SUBMIT_SLACK_NS` before its replay call returned (the driver
    submits a graph as its launch call returns); with the call that gives it. None without
    replays."""
    found = [(call.end_ns - GRAPH_SUBMIT_SLACK_NS - index.starts[first], call)
             for call, first in zip(matching.launches, matching.starts()) if is_replay(call)]
    return max(found, key=lambda pair: pair[0]) if found else None


def is_replay(call: HostCall) -> bool:
    """True for a graph replay call (not a Triton launch)."""
    return call.name in REPLAY_C_CALLS or call.name.startswith(REPLAY_FRAME_PREFIX)


def combine(first: Matching | None, second: Matching | None) -> Matching | None:
    """Both matchings' pairs as one, in call order (``shift`` from ``first``)."""
    if first is None or second is None:
        return first or second
    pairs = sorted(zip(first.launches + second.launches, first.kernels + second.kernels,
                       first.starts() + second.starts()), key=lambda p: (p[0].begin_ns, p[2]))
    return Matching(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs), first.shift,
                    tuple(p[2] for p in pairs))
