"""Causal bounds on the clock offset between a VizTracer report and a Proton trace (pure).

The offset ``d`` maps Proton time onto VizTracer time: ``viz_ns = proton_ns + d``.

* Lower bounds: a kernel cannot start before the host call that launched it began, so each
  matched pair (Triton launch call, Triton kernel) gives ``d >= launch.begin - kernel.start``;
  a CUDA-graph replay call pairs with the first kernel of its replay (:mod:`.replays`).
* Upper bounds: a call that waits for the GPU cannot return before the kernels it waits for
  have ended, so ``d <= wait.end - kernel.end`` for every kernel proven to be awaited by it.

A kernel is proven awaited by a wait when it was enqueued before the wait began, on a stream the
wait drains: a matched Triton kernel whose launch call returned before the wait began; any kernel
before such a kernel on the same stream (a stream runs in launch order); any kernel on that
stream that started, under the current upper bound, before the wait began (causality: it was
launched before it started). Stream waits (``Tensor.cpu`` ...) drain the stream of the last
Triton kernel launched before them; a device synchronisation drains every stream. Without stream
ids only the matched Triton kernels themselves are used (assumed on the waited stream).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from tokentrace.sources.host_calls import HostCall

# Kernel tuple: (name, start_ns, end_ns) or (name, start_ns, end_ns, stream).
KernelRow = Sequence


@dataclass(frozen=True)
class KernelIndex:
    """All kernels of a rank, indexed for the bound computations.

    Attributes:
        names, starts, ends: per kernel, sorted by start (Proton ns).
        streams: per kernel stream id, or None when the input carries none.
        by_stream: stream -> positions (into the arrays above) of its kernels, in start order.
        rank_in_stream: per kernel, its position in ``by_stream[its stream]``.
        stream_starts: stream -> starts of its kernels (for bisection).
        stream_end_max: stream -> running maximum of its kernels' ends.
        end_max: running maximum of all kernels' ends (start order).
        in_graph: per kernel, whether it ran in a CUDA-graph replay (None when not told).
    """

    names: tuple[str, ...]
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    streams: tuple | None
    by_stream: dict
    rank_in_stream: tuple[int, ...]
    stream_starts: dict
    stream_end_max: dict
    end_max: tuple[int, ...]
    in_graph: tuple[bool, ...] | None = None


def index_kernels(kernels: Sequence[KernelRow]) -> KernelIndex:
    """Sorts the kernels by start and precomputes the per-stream arrays."""
    rows = sorted(kernels, key=lambda row: (row[1], row[2]))
    has_streams = bool(rows) and all(len(row) > 3 and row[3] is not None for row in rows)
    streams = tuple(row[3] for row in rows) if has_streams else None
    by_stream: dict = {}
    rank_in_stream = []
    for position, row in enumerate(rows):
        members = by_stream.setdefault(streams[position] if streams else None, [])
        rank_in_stream.append(len(members))
        members.append(position)
    ends = tuple(row[2] for row in rows)
    return KernelIndex(
        names=tuple(row[0] for row in rows),
        starts=tuple(row[1] for row in rows),
        ends=ends,
        streams=streams,
        by_stream=by_stream,
        rank_in_stream=tuple(rank_in_stream),
        stream_starts={s: [rows[p][1] for p in ps] for s, ps in by_stream.items()},
        stream_end_max={s: list(itertools.accumulate((ends[p] for p in ps), max))
                        for s, ps in by_stream.items()},
        end_max=tuple(itertools.accumulate(ends, max)),
        in_graph=tuple(bool(row[4]) for row in rows) if rows and all(len(row) > 4 for row in rows) else None,
    )


@dataclass(frozen=True)
class Matching:
    """Host calls paired with the kernels they enqueued, under one alignment of the sequences.

    Attributes:
        launches: the matched calls (Triton launches, graph replays), in begin order.
        kernels: for each, the position in the :class:`KernelIndex` of the last kernel it
            enqueued (on that kernel's stream, every kernel before it was enqueued before).
        shift: the alignment: launch ``i`` (of all launches) <-> Triton kernel ``i + shift``.
        firsts: for each, the position of the first kernel it enqueued (the one that cannot
            start before the call began); None: the same as ``kernels`` (one kernel a call).
    """

    launches: tuple[HostCall, ...]
    kernels: tuple[int, ...]
    shift: int
    firsts: tuple[int, ...] | None = None

    def starts(self) -> tuple[int, ...]:
        """Positions of the first kernel of each call."""
        return self.kernels if self.firsts is None else self.firsts


def match_launches(launches: Sequence[HostCall], triton: Sequence[int], shift: int) -> Matching:
    """Pairs launch ``i`` with Triton kernel ``triton[i + shift]`` wherever both exist."""
    first = max(0, -shift)
    last = min(len(launches), len(triton) - shift)
    pairs = range(first, max(first, last))
    return Matching(tuple(launches[i] for i in pairs), tuple(triton[i + shift] for i in pairs), shift)


def lower_bound(matching: Matching, index: KernelIndex) -> int | None:
    """Largest ``launch.begin - kernel.start`` over the matched pairs (None without pairs)."""
    found = lower_bound_call(matching, index)
    return None if found is None else found[0]


def lower_bound_call(matching: Matching, index: KernelIndex) -> tuple[int, HostCall] | None:
    """The lower bound and the call that gives it (None without pairs)."""
    found = lower_bound_pair(matching, index)
    return None if found is None else found[:2]


def lower_bound_pair(matching: Matching, index: KernelIndex) -> tuple[int, HostCall, int] | None:
    """:func:`lower_bound_call` with the position of the kernel of its pair (the first pair that
    gives the bound, in the matching's order; None without pairs)."""
    if not matching.kernels:
        return None
    return max(((call.begin_ns - index.starts[k], call, k) for call, k in zip(matching.launches, matching.starts())),
               key=lambda found: found[0])


@dataclass(frozen=True)
class WaitBounds:
    """Upper bounds from the waits under one matching.

    Attributes:
        hi: the smallest bound kept (None when no wait gives one).
        kept: number of waits whose bound was used.
        contradicting: waits whose bound lies below the lower bound: they cannot have waited
            for the kernels matched to the launches before them (not a GPU wait, e.g. ``.cpu()``
            of a host tensor, or a wrong matching). They are left out of ``hi`` and counted.
        by: the wait that gives ``hi``.
    """

    hi: int | None
    kept: int
    contradicting: int
    by: HostCall | None = None


def wait_bounds(matching: Matching, index: KernelIndex, waits: Sequence[HostCall],
                lo: int, max_rounds: int = 6) -> WaitBounds:
    """Upper bounds from the waits, tightened by rounds of the start rule until stable."""
    found = wait_bounds_within(matching, index, waits, lo, None, running_ends(matching, index), max_rounds)
    assert found is not None  # never given up without a limit
    return found


def running_ends(matching: Matching, index: KernelIndex) -> tuple[list[int], list[int]]:
    """Per matched pair, in order, the latest end so far of the launch calls and of their
    kernels: what the waits' bounds read of a matching (:func:`wait_bounds_within`)."""
    return (list(itertools.accumulate((c.end_ns for c in matching.launches), max)),
            list(itertools.accumulate((index.ends[k] for k in matching.kernels), max)))


def wait_bounds_within(matching: Matching, index: KernelIndex, waits: Sequence[HostCall], lo: int,
                       most_contradicting: int | None, ends: tuple[list[int], list[int]],
                       max_rounds: int = 6) -> WaitBounds | None:
    """:func:`wait_bounds`, or None as soon as more than ``most_contradicting`` waits (None: no
    limit) are known to contradict: the final count is at least that. ``ends``: the matching's
    :func:`running_ends`.

    Each round's ``hi`` is below the last one's, so the start rule proves more kernels awaited
    and every wait's bound can only fall: a wait that contradicts in one round contradicts in
    every later one, and the count found so far in any round is a floor of the final count."""
    launch_ends, triton_end_max = ends
    hi = None
    result = WaitBounds(None, 0, 0)
    for _ in range(max_rounds):
        kept, contradicting, best = 0, 0, None
        for wait in waits:
            bound = _one_wait(wait, matching, index, launch_ends, triton_end_max, hi)
            if bound is None:
                continue
            if bound < lo:
                contradicting += 1
                if most_contradicting is not None and contradicting > most_contradicting:
                    return None
            else:
                kept += 1
                if best is None or bound < best[0]:  # the first of the smallest
                    best = (bound, wait)
        new_hi = best[0] if best is not None else None
        result = WaitBounds(new_hi, kept, contradicting, best[1] if best is not None else None)
        if new_hi is None or (hi is not None and new_hi >= hi):
            break
        hi = new_hi
    return result


def _one_wait(wait: HostCall, matching: Matching, index: KernelIndex, launch_ends: list[int],
              triton_end_max: list[int], hi: int | None) -> int | None:
    """The upper bound one wait gives, or None when no kernel is proven awaited by it."""
    # Matched launches whose call returned before the wait began (launch_ends is a running max).
    done = bisect.bisect_right(launch_ends, wait.begin_ns)
    if index.streams is None:
        # No stream ids: the matched Triton kernels are assumed to be on the waited stream.
        ends = [triton_end_max[done - 1]] if done else []
        if wait.waits_for_device:
            ends.append(_started_before_end(None, index, wait, hi))
    else:
        last_kernel = matching.kernels[done - 1] if done else None
        ends = [_stream_awaited_end(stream, index, matching, done, wait, hi)
                for stream in _drained_streams(wait, index, last_kernel)]
    ends = [end for end in ends if end is not None]
    return wait.end_ns - max(ends) if ends else None


def _drained_streams(wait: HostCall, index: KernelIndex, last_kernel: int | None) -> list:
    """Streams the wait drains: all for a device sync, else that of the last Triton kernel."""
    if wait.waits_for_device:
        return list(index.by_stream)
    if last_kernel is None or index.streams is None:
        return []
    return [index.streams[last_kernel]]


def _stream_awaited_end(stream, index: KernelIndex, matching: Matching, done: int,
                        wait: HostCall, hi: int | None) -> int | None:
    """Latest end among the kernels of ``stream`` proven enqueued before ``wait`` began."""
    last = _started_before(stream, index, wait, hi)
    # Stream order: every kernel before the last matched Triton kernel of this stream.
    for k in reversed(matching.kernels[:done]):
        if index.streams[k] == stream:
            last = max(last, index.rank_in_stream[k])
            break
    return index.stream_end_max[stream][last] if last >= 0 else None


def _started_before(stream, index: KernelIndex, wait: HostCall, hi: int | None) -> int:
    """Position (in ``stream``) of the last kernel that started before the wait began, for
    every offset up to ``hi`` (start + hi < wait.begin): it was launched before it. -1 if none."""
    if hi is None:
        return -1
    return bisect.bisect_left(index.stream_starts[stream], wait.begin_ns - hi) - 1


def _started_before_end(stream, index: KernelIndex, wait: HostCall, hi: int | None) -> int | None:
    """Latest end among the kernels of ``stream`` that the start rule proves launched before."""
    last = _started_before(stream, index, wait, hi)
    return index.stream_end_max[stream][last] if last >= 0 else None
