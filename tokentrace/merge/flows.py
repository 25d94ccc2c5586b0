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
    # only the X events at a flow event's time can be bound to: a cheap filter first; the map
    # (lane, sub-lane, ts) -> X is made in C, one X a key being the rule (lists are made only
    # where a key holds several)
    found = [i for i, event in enumerate(events) if event.ph == "X" and event.ts_ns in times]
    keys = [(events[i].lane, lanes[i], events[i].ts_ns) for i in found]
    slice_at: dict[tuple[int, int, int], int | None] = dict(zip(keys, found))
    for at in [at for at, index in enumerate(found) if events[index].dur_ns <= 0]:
        slice_at[keys[at]] = None
    if len(slice_at) < len(keys):
        starts: dict[tuple[int, int, int], list[int]] = defaultdict(list)
        for key, index in zip(keys, found):
            starts[key].append(index)
        slice_at.update((key, _shortest(events, at)) for key, at in starts.items() if len(at) > 1)
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
    # the X events' sub-lanes by (lane, ts), made in C: one X a (lane, ts) is the rule (every
    # real trace measured), so lists are made only for the keys that hold several
    keys = [(event.lane, event.ts_ns) for event, k in zip(events, lanes) if k]
    ks = [k for k in lanes if k]
    single = dict(zip(keys, ks))
    several: dict[tuple[int, int], list[int]] = {}
    if len(single) < len(keys):
        starts: dict[tuple[int, int], list[int]] = defaultdict(list)
        for key, k in zip(keys, ks):
            starts[key].append(k)
        several = {key: found for key, found in starts.items() if len(found) > 1}
    used: dict[tuple[int, int], int] = defaultdict(int)
    result, doubtful = [k or 1 for k in lanes], []
    for index in [i for i, k in enumerate(lanes) if not k]:  # the events that are not X
        event = events[index]
        if event.ph == "f":
            key = (event.lane, event.ts_ns)
            candidates = several.get(key)
            if candidates:
                result[index] = candidates[min(used[key], len(candidates) - 1)]
                used[key] += 1
            elif key in single:
                result[index] = single[key]
            elif event.flow_pair is not None:
                doubtful.append(index)
        elif event.ph == "s" and event.flow_pair is not None:
            key = (event.lane, event.ts_ns)
            if 1 not in several.get(key, ()) and single.get(key) != 1:
                doubtful.append(index)
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
