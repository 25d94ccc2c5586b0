"""Launch->kernel arrows as Perfetto v2 flows, written on the two ``X`` events themselves.

Instead of a pair of flow events of its own (``s`` ... ``f`` with ``bp: e``), an arrow is two keys
on slices already in the file: ``"bind_id": <id>, "flow_out": true`` on the launch's ``X`` event
and ``"bind_id": <id>, "flow_in": true`` on the kernel's. Perfetto's JSON importer
(``json_trace_parser.cc``, ``MaybeAddFlow``) begins the flow at the slice of the event that
carries ``flow_out`` and ends it at the slice of the event that carries ``flow_in``, leaving it
open: every kernel of one launch slice takes that slice's one id, and the ``flow`` table gets a
row ``(slice_out, slice_in)`` per kernel, as the pairs of events gave.

Same pairs as before. A ``s``/``f`` event binds to the slice on top of its thread's stack when
Perfetto reads it; at equal times Perfetto reads ``X`` events first, the longest first, then the
other events in file order (``TraceSorter``), so an event at an ``X`` start binds to the shortest
``X`` starting there on its (sub-)lane. A pair is converted only when that slice is certain at both
ends: an ``X`` with a positive duration, no tie and no zero-duration ``X`` starting there, the
launch slice starting before the kernel's, and no slice taking two roles (a kernel receives one
arrow; a slice that sends arrows receives none). Any other pair keeps its two events and its
id (of the real traces checked, one pair: a sync event starting with its call).

Ids: Perfetto gives the v1 flows that remain (tokenspeed's links, annotations, these fallbacks)
flow ids 0, 1, 2 ... from a 32-bit counter (``FlowTracker::GetFlowIdForV1Event``), in the space
of v2 ids: so v2 ids start at :data:`V2_ID_OFFSET`, out of the counter's reach.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

from tokentrace.sources.proton import ProtonEvent

# v2 bind ids are V2_ID_OFFSET + the rank's flow base + the number of the launch slice.
V2_ID_OFFSET = 1 << 32


def v2_binds(events: list[ProtonEvent], lanes: list[int]) -> tuple[dict[int, tuple[int, bool]], set[int]]:
    """The arrows that become v2 flows.

    Args:
        events: the rank's events, file order.
        lanes: each event's sub-lane (the slices a flow event binds to share it).

    Returns:
        ``X`` index -> ``(number of its launch slice, True for the launch / False for a kernel)``,
        and the indices of the ``s``/``f`` events those keys replace.
    """
    flows = [i for i, event in enumerate(events) if event.flow_pair is not None]
    if not flows:
        return {}, set()
    times = {events[i].ts_ns for i in flows}
    # only the X events at a flow event's time can be bound to: a cheap filter first
    starts: dict[tuple[int, int, int], list[int]] = defaultdict(list)  # (lane, sub-lane, ts) -> X
    for index in [i for i, event in enumerate(events) if event.ts_ns in times and event.ph == "X"]:
        event = events[index]
        starts[(event.lane, lanes[index], event.ts_ns)].append(index)
    slice_at = {key: _shortest(events, found) for key, found in starts.items()}
    n_pairs = 1 + max(events[i].flow_pair for i in flows)
    ends: list[list] = [[None] * n_pairs, [None] * n_pairs]  # s, then f: (event index, X index)
    for index in flows:
        event = events[index]
        ends[event.ph == "f"][event.flow_pair] = (index, slice_at.get((event.lane, lanes[index], event.ts_ns)))
    binds: dict[int, tuple[int, bool]] = {}
    replaced: set[int] = set()
    sources = 0
    for start, finish in zip(*ends):
        if start is None or finish is None:
            continue
        out, into = start[1], finish[1]
        if out is None or into is None or into in binds or events[out].ts_ns >= events[into].ts_ns:
            continue
        bound = binds.get(out)
        if bound is None:
            bound = binds[out] = (sources, True)
            sources += 1
        elif not bound[1]:
            continue
        binds[into] = (bound[0], False)
        replaced.add(start[0])
        replaced.add(finish[0])
    return binds, replaced


def _shortest(events: list[ProtonEvent], found: list[int]) -> int | None:
    """The ``X`` (of those starting at one time on one lane) a flow event there binds to when
    it is certain (see the module), else None."""
    if len(found) == 1:
        return found[0] if events[found[0]].dur_ns > 0 else None
    durations = [events[i].dur_ns for i in found]
    shortest = min(durations)
    if shortest <= 0 or durations.count(shortest) > 1:
        return None
    return found[durations.index(shortest)]


def flow_sublanes(events: list[ProtonEvent], lanes: list[int]) -> tuple[list[int], list[int]]:
    """Every event's sub-lane: flow ends go to the sub-lane of the slice they bind to; and the
    indices of the flow events that start no slice's time there (to be checked: every flow
    event of the real traces measured sits at a slice's start).

    A flow end binds to a slice of its lane starting at its time; several such slices are used
    in file order. Events that are neither give 1.
    """
    starts: dict[tuple[int, int], list[int]] = defaultdict(list)
    for event, k in zip(events, lanes):
        if k:
            starts[(event.lane, event.ts_ns)].append(k)
    used: dict[tuple[int, int], int] = defaultdict(int)
    result, doubtful = [], []
    for index, (event, k) in enumerate(zip(events, lanes)):
        if not k and event.ph == "f" and (candidates := starts.get((event.lane, event.ts_ns))):
            key = (event.lane, event.ts_ns)
            k = candidates[min(used[key], len(candidates) - 1)]
            used[key] += 1
        elif not k and event.ph == "s" and event.flow_pair is not None \
                and 1 not in starts.get((event.lane, event.ts_ns), ()):
            doubtful.append(index)
        elif not k and event.ph == "f" and event.flow_pair is not None:
            doubtful.append(index)
        result.append(k or 1)
    return result, doubtful


def unbound_pairs(events: list[ProtonEvent], lanes: list[int], doubtful: list[int]) -> set[int]:
    """The flow pairs whose start or end (among the events at ``doubtful``) no ``X`` slice of
    its (sub-)lane encloses (start <= t <= end): Perfetto would bind them to nothing."""
    spans: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for event, k in zip(events, lanes):
        if event.ph == "X":
            spans[(event.lane, k)].append((event.ts_ns, event.ts_ns + event.dur_ns))
    reach: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
    for key, found in spans.items():
        found.sort()
        ends, furthest = [], None
        for _, end in found:
            furthest = end if furthest is None else max(furthest, end)
            ends.append(furthest)
        reach[key] = ([start for start, _ in found], ends)
    unbound = set()
    for index in doubtful:
        event, k = events[index], lanes[index]
        starts, ends = reach.get((event.lane, k), ((), ()))
        index = bisect.bisect_right(starts, event.ts_ns) - 1
        if index < 0 or ends[index] < event.ts_ns:
            unbound.add(event.flow_pair)
    return unbound
