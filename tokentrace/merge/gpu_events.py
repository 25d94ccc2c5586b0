"""Proton events of one rank -> merged-file events, in two steps around the alignment.

1. :func:`build_rows` needs the Proton trace only, so the merge runs it while the host copy
   runs: lanes, flows, thread names, durations and every copied key, with times kept as ns
   from the Proton zero and threads as slots.
2. :meth:`ProtonRows.serialise` runs once the offset and the host ids are known: it takes the
   fresh ids, sets every row's ids and time and writes all rows with one ``orjson.dumps``.

* Kernels that overlap an earlier kernel of the same stream (Hopper PDL) go to an extra lane of
  that stream (``GPU Stream 7 (lane 2)``): Perfetto drops partially overlapping ``X`` events.
  Scopes on CPU lanes may nest; only partial overlaps move. A kernel's flow ``f`` moves with it.
* Each launch->kernel arrow gets a fresh flow id unique in the output file, so no arrow is lost
  to ``flow_duplicate_id`` and none crosses ranks; it is written as a v2 flow, keys on the launch
  and kernel ``X`` events instead of an ``s``/``f`` pair (:mod:`tokentrace.merge.flows`).
* tokenspeed's linked scopes (#740): a scope whose ``args.scope_id`` a VizTracer
  ``viztracer->proton`` start points at gets the matching finish, so Perfetto draws Python
  frame -> Proton scope -> kernel (:mod:`tokentrace.sources.links`).
"""

from __future__ import annotations

import bisect
import dataclasses
import warnings
from collections import defaultdict

import orjson

from tokentrace.errors import TokentraceWarning
from tokentrace.merge.flows import V2_ID_OFFSET, flow_sublanes, pair_layout, unbound_pairs, v2_binds
from tokentrace.merge.ids import IdAllocator
from tokentrace.sources.kineto_links import with_arrows
from tokentrace.sources.links import LINK_CATEGORY, LINK_NAME
from tokentrace.sources.proton import GPU_LANE_BASE, GRAPH_LANE_BASE, ProtonEvent, ProtonTrace
from tokentrace.units import ns_list_to_us_text

_COPIED_KEYS = ("name", "cat", "args")
# Up to this many events a rank's rows are made while the host copy runs; a larger trace has
# them made by serialise, a batch at a time.
EAGER_ROWS = 1 << 18


@dataclasses.dataclass(frozen=True)
class GpuThread:
    """One output thread of a rank's Proton process: an input lane or an extra lane of it.

    Attributes:
        tid: its fresh tid (0 in :class:`ProtonRows`: not taken yet).
        name: its thread name (``GPU Stream 7``, ``GPU Stream 7 (lane 2)`` ...).
        sort_index: its ``thread_sort_index`` (lanes in input order, extra lanes after theirs).
        key: ``(input lane, sub-lane)``: the order of the thread metadata.
    """

    tid: int
    name: str
    sort_index: int
    key: tuple[int, int]


@dataclasses.dataclass(frozen=True)
class ProtonRows:
    """The Proton events of one rank laid out for output, with neither offset nor fresh ids.

    Attributes:
        rows: one dict per event, file order, every key but ``pid``, ``tid`` and ``ts``
            (:meth:`serialise` sets those three, so it may be called again); ``None`` for a
            trace of more than :data:`EAGER_ROWS` events, whose rows are made in batches by
            :meth:`serialise` from ``lazy`` (a dict per event of millions is most of the memory).
        slots: per row, the index of its thread in ``threads``.
        threads: the output threads in order of first use (the order their tids are taken).
        times_ns: the distinct event times, ns from the Proton zero (a flow end shares its
            kernel's start, a flow start its launch scope's: t39 TP0 has 9.2k for 25.6k rows,
            so :meth:`serialise` formats a third of the times).
        time_slots: per row, the index of its time in ``times_ns``.
        first_ns: the earliest event time (ns from the Proton zero), ``None`` without events.
        dialect: the Proton layout (``3.9`` or ``3.8``).
        n_kernels: kernels written.
        n_flows: launch->kernel pairs written.
        n_extra_lanes: lanes added for overlapping events.
        scope_ids: ``(row index, args.scope_id)`` of every scope that carries a scope id.
        lazy: ``(events, flow_base, renumber, binds)`` the rows are made from when ``rows`` is None.
        flow_base: the first flow id the rows hold (:meth:`serialise` may put them on another).
    """

    rows: list[dict] | None = dataclasses.field(repr=False)
    slots: list[int] = dataclasses.field(repr=False)
    threads: tuple[GpuThread, ...]
    times_ns: list[int] = dataclasses.field(repr=False)
    time_slots: list[int] = dataclasses.field(repr=False)
    first_ns: int | None
    dialect: str
    n_kernels: int
    n_flows: int
    n_extra_lanes: int
    scope_ids: list[tuple[int, int]] = dataclasses.field(default_factory=list, repr=False)
    lazy: tuple | None = dataclasses.field(default=None, repr=False)
    flow_base: int = 1

    def serialise(self, shift_ns: int, ids: IdAllocator, links: dict[int, int] | None = None,
                  flow_base: int | None = None) -> ProtonOutput:
        """The rank's Proton events on the output axis: its fresh ids taken, one ``orjson.dumps``.

        The ids are taken from ``ids`` in a fixed order (the process pid, one tid per thread in
        order of first use, the ``tokentrace`` thread's tid), so they depend only on what ``ids``
        holds: the host ids (and, in a combined file, the ids of the ranks before).

        Args:
            shift_ns: added to every Proton time (offset, plus the common-axis shift when
                combined).
            ids: allocator of fresh ids, holding every id already used in the output file.
            links: scope id -> flow id of the rank's ``viztracer->proton`` starts: each scope
                with such an id gets the finish (written after the events, so a trace without
                links keeps its bytes).

            flow_base: the first launch->kernel flow id (default: the one the rows were built
                with); a combined file's rank ``i`` takes :func:`~tokentrace.merge.ids.flow_base`.
        """
        pid = ids.take()
        tids = [ids.take() for _ in self.threads]
        rank_tid = ids.take()
        starts = list(map(orjson.Fragment, ns_list_to_us_text([time + shift_ns for time in self.times_ns])))
        delta = 0 if flow_base is None else flow_base - self.flow_base
        blobs = [body for body in _dump(self, pid, tids, starts, delta) if body]
        finishes = _link_finishes(self, links or {}, pid, tids, starts)
        if finishes:
            blobs.append(memoryview(orjson.dumps(finishes, option=orjson.OPT_SORT_KEYS))[1:-1])
        threads = sorted((dataclasses.replace(t, tid=tid) for t, tid in zip(self.threads, tids)),
                         key=lambda t: t.key)
        first = None if self.first_ns is None else self.first_ns + shift_ns
        return ProtonOutput(
            pid, rank_tid, blobs, tuple(threads), first, self.dialect,
            self.n_kernels, self.n_flows, self.n_extra_lanes, len(finishes),
        )


@dataclasses.dataclass(frozen=True)
class ProtonOutput:
    """The Proton events of one rank, serialised on the output axis with their fresh ids.

    Attributes:
        pid: the fresh pid of the rank's Proton process.
        rank_tid: the fresh tid of its ``tokentrace`` thread (the ``tokentrace.rank`` instant).
        events: the serialised events, file order of the input; one comma-joined blob (a view
            of the dumped bytes; none without events).
        threads: every output thread with its tid, in lane order (the metadata order).
        first_ts_ns: earliest output time of any event.
        dialect: the Proton layout (``3.9`` or ``3.8``).
        n_kernels: kernels written.
        n_flows: launch->kernel pairs written.
        n_extra_lanes: lanes added for overlapping events.
        n_links: ``viztracer->proton`` finishes written (linked scopes, tokenspeed #740).
    """

    pid: int
    rank_tid: int
    events: list[memoryview] = dataclasses.field(repr=False)
    threads: tuple[GpuThread, ...]
    first_ts_ns: int | None
    dialect: str
    n_kernels: int
    n_flows: int
    n_extra_lanes: int
    n_links: int = 0


def _link_finishes(rows: ProtonRows, links: dict[int, int], pid: int, tids: list[int],
                   starts: list) -> list[dict]:
    """The finish of every linked scope, on the scope's thread at its start (``bp: e`` binds it
    to the scope): the pid, tid and ts its row gets."""
    finishes = []
    for index, scope_id in rows.scope_ids:
        flow_id = links.get(scope_id)
        if flow_id is not None:
            finishes.append({"ph": "f", "bp": "e", "cat": LINK_CATEGORY, "name": LINK_NAME, "id": flow_id,
                             "pid": pid, "tid": tids[rows.slots[index]], "ts": starts[rows.time_slots[index]]})
    return finishes


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
    by_lane: dict[int, list[tuple[int, int, int]]] = defaultdict(list)  # lane -> its X events
    for index, event in enumerate(events):
        if event.ph == "X":
            by_lane[event.lane].append((event.ts_ns, -event.dur_ns, index))
    result = [0] * len(events)
    for found in by_lane.values():
        found.sort()  # by start, the longest first; ties in file order (the index)
        stacks: list[list[int]] = []  # per sub-lane: end times of the open slices
        for ts, minus_dur, index in found:
            result[index] = _place(stacks, ts, ts - minus_dur, events[index].raw.get("cat") != "kernel")
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


def build_rows(trace: ProtonTrace, flow_base: int) -> ProtonRows:
    """Lays out the Proton events of one rank: everything that needs neither offset nor host ids.

    Flow ids are final here: they are a namespace of their own, which host ids cannot clash with.

    Args:
        trace: the rank's Proton side.
        flow_base: first flow id of this rank; v2 arrows get ``V2_ID_OFFSET + flow_base + launch
            slice number``, pairs left as ``s``/``f`` ``flow_base + pair index``.
    """
    events, lanes, binds, replaced, n_flows, renumber = _arrows(trace)
    slot_of: dict[tuple[int, int], int] = {}
    slots = []
    for event, k in zip(events, lanes):
        key = (event.lane, k)
        slot = slot_of.get(key)
        if slot is None:
            slot = slot_of[key] = len(slot_of)
        slots.append(slot)
    threads = tuple(GpuThread(0, _thread_name(trace, lane, k), lane * 16 + k, (lane, k)) for lane, k in slot_of)
    time_of: dict[int, int] = {}
    time_slots = [time_of.setdefault(event.ts_ns, len(time_of)) for event in events]
    if replaced:  # after the slots and times: the threads' order and the first time stay
        gone = sorted(replaced)
        binds = {old - bisect.bisect_left(gone, old): bind for old, bind in binds.items()}
        kept = [i not in replaced for i in range(len(events))]
        events, slots, time_slots = ([x for x, keep in zip(column, kept) if keep]
                                     for column in (events, slots, time_slots))
    eager = len(events) <= EAGER_ROWS
    return ProtonRows(
        _rows(events, flow_base, renumber, binds) if eager else None, slots, threads, list(time_of), time_slots,
        min(time_of, default=None), trace.dialect, trace.n_kernels, n_flows,
        sum(1 for _, k in slot_of if k > 1), _scope_ids(events),
        None if eager else (events, flow_base, renumber, binds), flow_base,
    )


def _arrows(trace: ProtonTrace) -> tuple[list[ProtonEvent], list[int], dict, set[int], int, dict | None]:
    """The rank's events with their sub-lanes and its arrows' v2 keys (:mod:`.flows`): the events,
    each one's sub-lane, ``X`` index -> v2 keys, the indices of the flow events those replace,
    the number of arrows and their new numbers where some were dropped (else None)."""
    events, n_flows = trace.events, trace.n_flows
    lanes = sublanes(events)
    if trace.launch_pairs:  # a torch-profiler trace's arrows, kept as pairs
        layout = pair_layout(events, lanes, trace.launch_pairs)
        if layout is not None:
            return layout.events, layout.lanes, layout.binds, set(), n_flows, None
        events = with_arrows(events, trace.launch_pairs)
        lanes = sublanes(events)
    lanes, doubtful = flow_sublanes(events, lanes)
    unbound = unbound_pairs(events, lanes, doubtful) if doubtful else set()
    renumber = None
    if unbound:  # an inconsistent trace: Perfetto would count flow_no_enclosing_slice
        kept = [i for i, e in enumerate(events) if e.flow_pair is None or e.flow_pair not in unbound]
        events, lanes = [events[i] for i in kept], [lanes[i] for i in kept]
        renumber = {pair: index for index, pair in enumerate(sorted(set(range(n_flows)) - unbound))}
        n_flows -= len(unbound)
        warnings.warn(
            f"{trace.paths[0]}: {len(unbound)} of {trace.n_flows} launch->kernel arrows dropped: their "
            "start or end lies on no slice of its lane (times or lanes of the trace disagree)",
            TokentraceWarning, stacklevel=2)
    binds, replaced = v2_binds(events, lanes) if n_flows else ({}, set())
    return events, lanes, binds, replaced, n_flows, renumber


def _scope_ids(events: list[ProtonEvent]) -> list[tuple[int, int]]:
    """``(index, scope id)`` of the scopes (not kernels) that carry an integer ``args.scope_id``."""
    found = []
    for index, event in enumerate(events):
        args = event.raw.get("args")
        if event.ph == "X" and isinstance(args, dict) and event.raw.get("cat") != "kernel":
            scope_id = args.get("scope_id")
            if isinstance(scope_id, int) and not isinstance(scope_id, bool):
                found.append((index, scope_id))
    return found


def _thread_name(trace: ProtonTrace, lane: int, k: int) -> str:
    name = lane_name(trace, lane)
    return name if k == 1 else f"{name} (lane {k})"


def _rows(events: list[ProtonEvent], flow_base: int, renumber: dict[int, int] | None = None,
          binds: dict[int, tuple[int, bool]] | None = None, first: int = 0) -> list[dict]:
    """The output events without ``pid``, ``tid`` and ``ts`` (set by :func:`_dump`); durations
    in one batch; ``renumber`` maps flow pairs to their ids when some were dropped; ``binds``
    gives the v2 flow keys of the ``X`` events (by index in the whole list: ``events`` starts at
    ``first``)."""
    fragment = orjson.Fragment
    durations = map(fragment, ns_list_to_us_text([event.dur_ns for event in events if event.ph == "X"]))
    binds = binds or {}
    v2_base = V2_ID_OFFSET + flow_base
    rows = []
    for index, event in enumerate(events, first):
        raw = event.raw
        row = {"ph": event.ph}
        for key in _COPIED_KEYS:
            if key in raw:
                row[key] = raw[key]
        if event.ph == "X":
            row["dur"] = next(durations)
            bind = binds.get(index)
            if bind is not None:
                row["bind_id"] = v2_base + bind[0]
                row["flow_out" if bind[1] else "flow_in"] = True
        elif event.flow_pair is not None:  # s / f
            row["id"] = flow_base + (event.flow_pair if renumber is None else renumber[event.flow_pair])
            row["bp"] = raw.get("bp", "e")
        rows.append(row)
    return rows


def _dump(rows: ProtonRows, pid: int, tids: list[int], starts: list, flow_delta: int = 0) -> list[memoryview]:
    """Sets every row's ids and ``ts`` and serializes them (sorted keys): one ``orjson.dumps``,
    or one per batch of :data:`EAGER_ROWS` rows made on the spot for a larger trace.

    One call over a list of dicts, not one per event (~10^4 per rank): each call pays Python's
    call overhead and allocates its own output buffer; each distinct time is formatted once, in
    one batch, and its fragment shared by its rows. The brackets are cut off by a view: slicing
    the bytes would copy the whole serialisation (MBs).
    """
    if rows.rows is not None:
        flows = [row for row in rows.rows if "id" in row or "bind_id" in row] if flow_delta else []
        _move_flows(flows, flow_delta)
        try:
            return [_dump_rows(rows.rows, rows.slots, rows.time_slots, pid, tids, starts)]
        finally:  # the rows keep their own ids: serialise may be called again
            _move_flows(flows, -flow_delta)
    events, flow_base, renumber, binds = rows.lazy
    return [_dump_rows(_rows(events[low:low + EAGER_ROWS], flow_base + flow_delta, renumber, binds, low),
                       rows.slots[low:low + EAGER_ROWS], rows.time_slots[low:low + EAGER_ROWS], pid, tids, starts)
            for low in range(0, len(events), EAGER_ROWS)]


def _move_flows(flows: list[dict], delta: int) -> None:
    for row in flows:
        row["bind_id" if "bind_id" in row else "id"] += delta


def _dump_rows(batch: list[dict], slots: list[int], times: list[int], pid: int, tids: list[int],
               starts: list) -> memoryview:
    for row, slot, time in zip(batch, slots, times):
        row["pid"] = pid
        row["tid"] = tids[slot]
        row["ts"] = starts[time]
    return memoryview(orjson.dumps(batch, option=orjson.OPT_SORT_KEYS))[1:-1]
