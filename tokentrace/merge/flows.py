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
import dataclasses
from collections import defaultdict

from tokentrace.sources.kineto_links import arrow_finish, arrow_start
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
    slice_at = _slices_at(events, lanes, {events[i].ts_ns for i in flows})
    n_pairs = 1 + max(events[i].flow_pair for i in flows)
    ends: list[list] = [[None] * n_pairs, [None] * n_pairs]  # s, then f: (event index, X index)
    for index in flows:
        event = events[index]
        ends[event.ph == "f"][event.flow_pair] = (index, slice_at.get((event.lane, lanes[index], event.ts_ns)))
    binds, replaced = _Binds(events), set()
    for start, finish in zip(*ends):
        if start is not None and finish is not None and binds.bind(start[1], finish[1]):
            replaced.add(start[0])
            replaced.add(finish[0])
    return binds.keys, replaced


def _slices_at(events: list[ProtonEvent], lanes: list[int], times: set[int]) -> dict[tuple[int, int, int], int | None]:
    """``(lane, sub-lane, ts)`` -> the ``X`` a flow event there binds to when it is certain (see
    the module), else None; for the ``X`` events starting at one of ``times`` (a cheap filter
    first: only those can be bound to)."""
    # the map is made in C, one X a key being the rule (lists are made only where a key holds
    # several)
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
    return slice_at


class _Binds:
    """The v2 keys of the arrows bound so far: slice -> ``(number of its launch slice, True for
    the launch)``, launch slices numbered in the order they are first bound."""

    def __init__(self, events: list[ProtonEvent]) -> None:
        self.events = events
        self.keys: dict[int, tuple[int, bool]] = {}
        self._sources = 0

    def bind(self, out: int | None, into: int | None) -> bool:
        """Records the arrow from slice ``out`` to slice ``into`` where it can be a v2 flow: both
        slices certain, the launch first, no slice taking two roles."""
        keys = self.keys
        if out is None or into is None or into in keys or self.events[out].ts_ns >= self.events[into].ts_ns:
            return False
        bound = keys.get(out)
        if bound is None:
            bound = keys[out] = (self._sources, True)
            self._sources += 1
        elif not bound[1]:
            return False
        keys[into] = (bound[0], False)
        return True


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
    return _flow_sublanes(events, lanes, *_x_sublanes(events, lanes))


def _flow_sublanes(events: list[ProtonEvent], lanes: list[int], single: dict, several: dict
                   ) -> tuple[list[int], list[int]]:
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


@dataclasses.dataclass(frozen=True)
class PairLayout:
    """A torch-profiler trace's events with its arrows laid out from their pairs
    (:func:`pair_layout`).

    Attributes:
        events: the events, with ``s``/``f`` events for the arrows that are not v2 flows.
        lanes: each event's sub-lane.
        binds: ``X`` index in :attr:`events` -> its v2 keys (as :func:`v2_binds` gives them).
    """

    events: list[ProtonEvent]
    lanes: list[int]
    binds: dict[int, tuple[int, bool]]


def pair_layout(events: list[ProtonEvent], lanes: list[int], pairs: list[tuple[int, int]]) -> PairLayout | None:
    """What :func:`flow_sublanes` and :func:`v2_binds` give, and the flow events they replace
    left out, for ``events`` with the arrows of ``pairs`` as flow events
    (:func:`~tokentrace.sources.kineto_links.with_arrows`), without making a flow event for
    the arrows that become v2 flows (most of them: half of a torch-profiler trace's
    events otherwise). None where that cannot be told without them (the caller makes them
    then): an arrow end that binds to no slice for certain, a flow event of the trace's own
    at a time where several slices start on its lane and an arrow ends too, or an arrow's end
    whose (lane, sub-lane) would come first in the file there (the order of the threads).

    Args:
        events: the trace's events, no flow event of ``pairs`` among them.
        lanes: each event's sub-lane from :func:`~tokentrace.merge.gpu_events.sublanes`.
        pairs: ``(call index, activity index)`` of each arrow, in activity order.
    """
    single, several = _x_sublanes(events, lanes)
    x_lanes = lanes
    lanes, doubtful = _flow_sublanes(events, x_lanes, single, several)
    if doubtful:
        return None
    finish_lanes, used = [], defaultdict(int)
    for call, activity in pairs:
        start, finish = events[call], events[activity]
        key = (start.lane, start.ts_ns)
        if 1 not in several.get(key, ()) and single.get(key) != 1:
            return None
        key = (finish.lane, finish.ts_ns)
        candidates = several.get(key)
        if candidates:  # (the f events at a key are used in file order: the pairs' order)
            finish_lanes.append(candidates[min(used[key], len(candidates) - 1)])
            used[key] += 1
        elif key in single:
            finish_lanes.append(single[key])
        else:
            return None
    if used and any(event.ph == "f" and (event.lane, event.ts_ns) in used
                    for event, k in zip(events, x_lanes) if not k):
        return None  # the trace's own flow event takes one of those slices in file order
    times = {events[call].ts_ns for call, _ in pairs} | {events[activity].ts_ns for _, activity in pairs}
    slice_at = _slices_at(events, lanes, times)
    binds, kept, anchored = _Binds(events), [], []
    for pair, (call, activity) in enumerate(pairs):
        start, finish = events[call], events[activity]
        if not binds.bind(slice_at.get((start.lane, 1, start.ts_ns)),
                          slice_at.get((finish.lane, finish_lanes[pair], finish.ts_ns))):
            kept.append(pair)
            continue
        # a flow event left out on another (lane, sub-lane) than the slice it follows
        if lanes[call] != 1:
            anchored.append((call, (start.lane, 1)))
        if lanes[activity] != finish_lanes[pair]:
            anchored.append((activity, (finish.lane, finish_lanes[pair])))
    layout = PairLayout(events, lanes, binds.keys)
    if kept:
        layout, anchored = _with_kept(layout, pairs, kept, finish_lanes, anchored)
    if anchored:
        first: dict[tuple[int, int], int] = {}
        for index, (event, k) in enumerate(zip(layout.events, layout.lanes)):
            first.setdefault((event.lane, k), index)
        if any(first[key] > index for index, key in anchored):
            return None
    return layout


def _with_kept(layout: PairLayout, pairs: list[tuple[int, int]], kept: list[int], finish_lanes: list[int],
               anchored: list[tuple[int, tuple[int, int]]]) -> tuple[PairLayout, list[tuple[int, tuple[int, int]]]]:
    """``layout`` with the flow events of the ``kept`` arrows, each right after its slice (a
    call's in pair order), and ``anchored``: the indices in both moved past those events."""
    after: dict[int, list[tuple[ProtonEvent, int]]] = defaultdict(list)
    for pair in kept:
        call, activity = pairs[pair]
        after[call].append((arrow_start(layout.events[call], pair), 1))
        after[activity].append((arrow_finish(layout.events[activity], pair), finish_lanes[pair]))
    events, lanes, moved = [], [], []
    for index, (event, k) in enumerate(zip(layout.events, layout.lanes)):
        moved.append(len(events))
        events.append(event)
        lanes.append(k)
        for added, added_k in after.get(index, ()):
            events.append(added)
            lanes.append(added_k)
    return (PairLayout(events, lanes, {moved[index]: bind for index, bind in layout.binds.items()}),
            [(moved[index], key) for index, key in anchored])


def _x_sublanes(events: list[ProtonEvent], lanes: list[int]) -> tuple[dict, dict]:
    """The ``X`` events' sub-lanes by ``(lane, ts)``: one of them for every key, and all of them,
    in file order, for the keys that hold several."""
    # made in C: one X a (lane, ts) is the rule (every real trace measured), so lists are made
    # only for the keys that hold several
    keys = [(event.lane, event.ts_ns) for event, k in zip(events, lanes) if k]
    ks = [k for k in lanes if k]
    single = dict(zip(keys, ks))
    several: dict[tuple[int, int], list[int]] = {}
    if len(single) < len(keys):
        starts: dict[tuple[int, int], list[int]] = defaultdict(list)
        for key, k in zip(keys, ks):
            starts[key].append(k)
        several = {key: found for key, found in starts.items() if len(found) > 1}
    return single, several


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
