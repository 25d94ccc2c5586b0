"""Proton events of one rank -> merged-file events: lanes, fresh ids, flows, names.

* Kernels that overlap an earlier kernel of the same stream (Hopper PDL) go to an extra lane of
  that stream (``GPU Stream 7 (lane 2)``): Perfetto drops partially overlapping ``X`` events.
  Scopes on CPU lanes may nest; only partial overlaps move. A kernel's flow ``f`` moves with it.
* Each launch->kernel pair gets a fresh flow id unique in the output file, so no arrow is lost
  to ``flow_duplicate_id`` and none crosses ranks.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import orjson

from tokentrace.merge.ids import IdAllocator
from tokentrace.sources.proton import GPU_LANE_BASE, GRAPH_LANE_BASE, ProtonEvent, ProtonTrace
from tokentrace.units import ns_list_to_us_text

_COPIED_KEYS = ("name", "cat", "args")


@dataclasses.dataclass
class ProtonOutput:
    """The Proton events of one rank, ready to write.

    Attributes:
        events: serialized events (timed), file order of the input; one comma-joined blob.
        threads: ``(tid, name, sort_index)`` of every output thread.
        first_ts_ns: earliest output time of any event.
        n_kernels: kernels written.
        n_flows: launch->kernel pairs written.
        n_extra_lanes: lanes added for overlapping events.
    """

    events: list[bytes]
    threads: list[tuple[int, str, int]]
    first_ts_ns: int | None
    n_kernels: int
    n_flows: int
    n_extra_lanes: int
    rows: list[dict] = dataclasses.field(default_factory=list, repr=False)


def shifted(output: ProtonOutput, trace: ProtonTrace, shift_ns: int, old_shift_ns: int) -> ProtonOutput:
    """``output`` (built with ``old_shift_ns``) moved to ``shift_ns``: new times, one dumps.

    Lets the merge build the events before the offset is known (a gzip report's anchor is at
    its end) and redo only the times after the copy (~15 ms instead of 80-140 ms, t39 TP0).
    """
    if shift_ns == old_shift_ns:
        return output
    first = None if output.first_ts_ns is None else output.first_ts_ns - old_shift_ns + shift_ns
    body = _dump(output.rows, trace.events, shift_ns)
    return dataclasses.replace(output, events=[body] if body else [], first_ts_ns=first)


def lane_name(trace: ProtonTrace, lane: int) -> str:
    """The thread name of an input lane (Proton's own, or the layout's convention)."""
    if lane in trace.lane_names:
        return trace.lane_names[lane]
    if trace.dialect == "3.8":
        return f"GPU Stream {lane}"
    if lane >= GPU_LANE_BASE:
        return f"GPU Stream {lane - GPU_LANE_BASE}"
    if lane >= GRAPH_LANE_BASE:
        return f"CUDA Graph {lane - GRAPH_LANE_BASE}"
    return f"CPU Thread {lane}"


def assign_sublanes(events: list[ProtonEvent]) -> dict[int, int]:
    """Greedy lanes per input lane: ``id(event) -> sub-lane`` (1 = the original lane)."""
    return {id(event): k for event, k in zip(events, sublanes(events)) if k}


def sublanes(events: list[ProtonEvent]) -> list[int]:
    """The sub-lane of every ``X`` event (1 = the original lane), 0 for other events.

    A kernel goes to the first sub-lane whose previous kernel has ended; a scope may also nest
    inside the open scope of a sub-lane, but never overlap it partially.
    """
    by_lane: dict[int, list[int]] = defaultdict(list)  # lane -> indices of its X events
    for index, event in enumerate(events):
        if event.ph == "X":
            by_lane[event.lane].append(index)
    result = [0] * len(events)
    for indices in by_lane.values():
        # stable sort: ties keep file order
        indices.sort(key=lambda i: (events[i].ts_ns, -events[i].dur_ns))
        stacks: list[list[int]] = []  # per sub-lane: end times of the open slices
        for index in indices:
            event = events[index]
            result[index] = _place(stacks, event.ts_ns, event.end_ns, event.raw.get("cat") != "kernel")
    return result


def _place(stacks: list[list[int]], start: int, end: int, nest: bool) -> int:
    for index, stack in enumerate(stacks):
        while stack and stack[-1] <= start:
            stack.pop()
        if not stack or (nest and end <= stack[-1]):
            stack.append(end)
            return index + 1
    stacks.append([end])
    return len(stacks)


def build_events(
    trace: ProtonTrace, shift_ns: int, gpu_pid: int, ids: IdAllocator, flow_base: int
) -> ProtonOutput:
    """Serializes the Proton events of one rank on the output time axis.

    Args:
        trace: the rank's Proton side.
        shift_ns: added to every Proton time (offset, plus the common-axis shift when combined).
        gpu_pid: the fresh pid of the rank's Proton process.
        ids: allocator of fresh thread ids (shared by the whole output file).
        flow_base: first flow id of this rank; pairs get ``flow_base + pair index``.
    """
    events = trace.events
    lanes = _flow_sublanes(events, sublanes(events))
    tids: dict[tuple[int, int], int] = {}
    event_tids = []
    for event, k in zip(events, lanes):
        key = (event.lane, k)
        tid = tids.get(key)
        if tid is None:
            tid = tids[key] = ids.take()
        event_tids.append(tid)
    threads = [(tid, _thread_name(trace, lane, k), lane * 16 + k) for (lane, k), tid in sorted(tids.items())]
    first = min((e.ts_ns for e in events), default=None)
    rows = _rows(events, event_tids, gpu_pid, flow_base)
    body = _dump(rows, events, shift_ns)
    return ProtonOutput(
        [body] if body else [], threads, None if first is None else first + shift_ns, trace.n_kernels,
        trace.n_flows, sum(1 for _, k in tids if k > 1), rows,
    )


def _flow_sublanes(events: list[ProtonEvent], lanes: list[int]) -> list[int]:
    """Every event's sub-lane: flow ends go to the sub-lane of the slice they bind to.

    A flow end binds to a slice of its lane starting at its time; several such slices are used
    in file order. Events that are neither give 1.
    """
    starts: dict[tuple[int, int], list[int]] = defaultdict(list)
    for event, k in zip(events, lanes):
        if k:
            starts[(event.lane, event.ts_ns)].append(k)
    used: dict[tuple[int, int], int] = defaultdict(int)
    result = []
    for event, k in zip(events, lanes):
        if not k and event.ph == "f" and (candidates := starts.get((event.lane, event.ts_ns))):
            key = (event.lane, event.ts_ns)
            k = candidates[min(used[key], len(candidates) - 1)]
            used[key] += 1
        result.append(k or 1)
    return result


def _thread_name(trace: ProtonTrace, lane: int, k: int) -> str:
    name = lane_name(trace, lane)
    return name if k == 1 else f"{name} (lane {k})"


def _rows(events: list[ProtonEvent], tids: list[int], pid: int, flow_base: int) -> list[dict]:
    """The output events without their ``ts`` (set by :func:`_dump`); durations in one batch."""
    fragment = orjson.Fragment
    durations = map(fragment, ns_list_to_us_text([event.dur_ns for event in events if event.ph == "X"]))
    rows = []
    for event, tid in zip(events, tids):
        raw = event.raw
        row = {"ph": event.ph, "pid": pid, "tid": tid}
        for key in _COPIED_KEYS:
            if key in raw:
                row[key] = raw[key]
        if event.ph == "X":
            row["dur"] = next(durations)
        elif event.flow_pair is not None:  # s / f
            row["id"] = flow_base + event.flow_pair
            row["bp"] = raw.get("bp", "e")
        rows.append(row)
    return rows


def _dump(rows: list[dict], events: list[ProtonEvent], shift_ns: int) -> bytes:
    """Sets every row's ``ts`` and serializes them (sorted keys), one ``orjson.dumps`` call.

    One call over a list of dicts costs a third of one call per event (25k events per rank);
    the times are formatted in one batch.
    """
    starts = map(orjson.Fragment, ns_list_to_us_text([event.ts_ns + shift_ns for event in events]))
    for row, start in zip(rows, starts):
        row["ts"] = start
    return orjson.dumps(rows, option=orjson.OPT_SORT_KEYS)[1:-1]
