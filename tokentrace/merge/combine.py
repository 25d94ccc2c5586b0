"""``--combine``: every rank in one file, on a common time axis (:func:`time_origin`).

Ranks are placed with the VizTracer wall-clock anchors (``unix = base + ts``), so hosts with
different boot times line up; ranks of one host share its monotonic axis. A rank on the common
axis unshifted whose host ids no earlier rank holds is copied: its host events from its per-rank
file (:mod:`.host_span`), its GPU side from the part its worker wrote (:mod:`.part`). Any other
rank is rewritten: fresh pids and tids, shifted times, its events parsed a batch at a time. Every
tokenspeed link (``viztracer->proton``) gets an id in tokenspeed's per-rank namespace either way.
Ranks are streamed one at a time, so memory is bounded by the largest rank. The reports'
``viztracer_metadata`` and ``file_info`` are combined (see docs/merged-format.md).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import BinaryIO

import orjson

from tokentrace.merge.gpu_events import build_rows
from tokentrace.merge.host_batches import read_batches
from tokentrace.merge.host_span import LinkStartsUnreadable, copy_file, copy_host_span
from tokentrace.merge.ids import IdAllocator, combined_ids, flow_base
from tokentrace.merge.metadata import block, host_process_events, kept_members
from tokentrace.merge.rank_events import RankPlacement, RankResult, rank_events
from tokentrace.options import RawOptions
from tokentrace.runtime.files import atomic_output
from tokentrace.sources._raw import VizInfo
from tokentrace.sources.backend import current, reading
from tokentrace.sources.discover import RankFiles
from tokentrace.sources.event_fields import load_lenient
from tokentrace.sources.gpu_trace import read_gpu_trace
from tokentrace.sources.links import LINK_CATEGORY, LINK_NAME, combined_link_id
from tokentrace.units import ns_list_to_us_text, us_list_to_ns
from tokentrace.version import tool_version

_DROPPED_HOST_META = ("process_name", "process_sort_index")  # replaced by "<tag> host"
# Anchors (Unix ns of a rank's ts 0) closer than this are one clock: VizTracer's processes on
# one host differ by a few ns (REALTIME - MONOTONIC read at each start; the shared sets: 0-3 ns),
# and hosts' anchors agree only to their clock sync (NTP: far more), so a shift below it is noise;
# a rank with no shift can be copied rather than rewritten (:mod:`.host_span`).
SAME_CLOCK_NS = 1_000


def time_origin(results: list[RankResult]) -> tuple[int | None, list[int]]:
    """The Unix ns of the common zero (None without anchors) and each rank's host shift (ns).

    The common axis is the VizTracer axis of the rank with the earliest anchor; a rank whose
    anchor is later by less than :data:`SAME_CLOCK_NS` shares it (shift 0). Without anchors on
    every rank the monotonic axes are taken as one (shift 0 each).
    """
    if not results or any(r.time_origin_unix_ns is None for r in results):
        return None, [0 for _ in results]
    origin = min(r.time_origin_unix_ns for r in results)
    shifts = [r.time_origin_unix_ns - origin for r in results]
    return origin, [0 if shift < SAME_CLOCK_NS else shift for shift in shifts]


def merge_combined(ranks: list[RankFiles], results: list[RankResult], path: Path, compress: bool,
                   raw: RawOptions = RawOptions()) -> None:
    """Writes every rank into ``path`` (see docs/merged-format.md, combined file).

    A rank whose worker wrote its part (:class:`~tokentrace.merge.rank_events.CombinedPart`), whose
    shift is 0 and whose host ids no earlier copied rank holds is copied (:mod:`.host_span`;
    unless ``raw.copy_ranks`` is off); every other rank is rewritten: its events parsed a batch
    at a time, with fresh host ids. The combined file's task entry: every reader below reads as
    ``raw`` (the merge's ``MergeOptions.raw``) says (:func:`tokentrace.sources.backend.reading`).
    """
    with reading(raw):
        _write_combined(ranks, results, path, compress)


def _write_combined(ranks: list[RankFiles], results: list[RankResult], path: Path, compress: bool) -> None:
    origin, shifts = time_origin(results)
    copied = _copied_ranks(results, shifts, compress) if current().copy_ranks else set()
    ids = combined_ids(len(results), set().union(*(results[i].combined_part.host_ids for i in copied)))
    records, kept = [], []
    with atomic_output(path, compress) as write:
        write(b'{"traceEvents": [\n')
        out = _EventWriter(write)
        for index, (files, result, shift) in enumerate(zip(ranks, results, shifts)):
            if index in copied and _copy_rank(write.plain, out, result, index):
                part = result.combined_part
                record = part.record | {"warnings": list(result.warnings)}
                rank_kept = _kept_objects(load_lenient(b"{" + part.kept + b"}") if part.kept else {})
            else:
                proton = None if files.viztracer is None else read_gpu_trace(files)
                record, rank_kept = _rank(files, result, proton, shift, ids, index, out)
                del proton
            records.append(record)
            kept.append((result.tag, rank_kept))
        write(b'\n],\n' + kept_members(combined_kept(kept, origin)) + b'"displayTimeUnit": "ns",\n"tokentrace": ')
        record = block(records, combined=True, origin=origin, version=tool_version())
        write(orjson.dumps(record, option=orjson.OPT_SORT_KEYS) + b"}\n")


def _copied_ranks(results: list[RankResult], shifts: list[int], compress: bool) -> set[int]:
    """The ranks copied rather than rewritten: with a part, shift 0, host ids of their own."""
    copied: set[int] = set()
    seen: set[int] = set()
    for index, (result, shift) in enumerate(zip(results, shifts)):
        part = result.combined_part
        if compress or part is None or shift or part.host_ids & seen:
            continue
        copied.add(index)
        seen |= part.host_ids
    return copied


def _copy_rank(plain: BinaryIO, out: _EventWriter, result: RankResult, index: int) -> bool:
    """Copies the rank's host events and its part into the output; False (nothing written)
    when its link starts cannot be namespaced in place: the rank is rewritten instead."""
    part = result.combined_part
    mark = plain.tell(), out.started, out.in_batches
    try:
        if part.host_span[1] > part.host_span[0]:
            out.start_piece()
            with open(result.output, "rb") as source:
                found = copy_host_span(source.fileno(), part.host_span, part.span_links, index, plain.write,
                                       plain)
            if part.links_read and found != part.link_ids:
                raise LinkStartsUnreadable
    except LinkStartsUnreadable:
        plain.seek(mark[0])
        plain.truncate()
        out.started, out.in_batches = mark[1], mark[2]
        return False
    out.start_piece()
    with open(part.path, "rb") as piece:
        copy_file(piece.fileno(), plain.write, plain)
    return True


def _kept_objects(report_kept: dict) -> dict:
    """The report's ``viztracer_metadata`` and ``file_info`` (when JSON objects)."""
    return {key: report_kept[key] for key in ("viztracer_metadata", "file_info")
            if isinstance(report_kept.get(key), dict)}


def combined_kept(kept: list[tuple[str, dict]], origin: int | None) -> dict:
    """The combined file's ``viztracer_metadata`` and ``file_info``.

    ``viztracer_metadata``: ``baseTimeNanoseconds`` is the Unix ns of ts 0 on the combined axis
    (so ``unix = base + ts`` still holds; absent without anchors), ``overflow`` is true when any
    rank's buffer wrapped, ``version`` is the first rank's, and ``ranks`` holds each rank's own
    metadata by tag. ``file_info``: the union of the ranks' ``files`` and ``functions`` (the first
    rank's entry wins for a path both hold: the same source file).
    """
    metas = {tag: k["viztracer_metadata"] for tag, k in kept if "viztracer_metadata" in k}
    infos = [k["file_info"] for _, k in kept if "file_info" in k]
    out: dict = {}
    if metas:
        first = next(iter(metas.values()))
        meta = {"version": first.get("version", ""),
                "overflow": any(bool(m.get("overflow")) for m in metas.values()), "ranks": metas}
        if origin is not None:
            meta["baseTimeNanoseconds"] = origin
        out["viztracer_metadata"] = meta
    if infos:
        union: dict = {}
        for info in infos:
            for key, value in info.items():
                if isinstance(value, dict):
                    union.setdefault(key, {})
                    for name, item in value.items():
                        union[key].setdefault(name, item)
                else:
                    union.setdefault(key, value)
        out["file_info"] = union
    return out


class _EventWriter:
    """Writes events comma-separated: a rank's host batches joined by ``,`` (as one list
    dumped), every other piece after ``,\\n``."""

    def __init__(self, write) -> None:
        self.write, self.started, self.in_batches = write, False, False

    def batch(self, blob: bytes) -> None:
        if blob:
            self.write((b"," if self.in_batches else b",\n" if self.started else b"") + blob)
            self.started = self.in_batches = True

    def start_piece(self) -> None:
        """Writes the separator before a piece the caller writes itself."""
        self.in_batches = False
        if self.started:
            self.write(b",\n")
        self.started = True

    def pieces(self, events: list) -> None:
        """Each piece written on its own: a rank's GPU rows are one piece of hundreds of MB,
        which a join would copy once more."""
        self.in_batches = False
        for piece in events:
            if self.started:
                self.write(b",\n")
            self.write(piece)
            self.started = True


def _rank(files, result, proton, shift, ids, index, out: _EventWriter) -> tuple[dict, dict]:
    """Writes one rank's events (host, then GPU); returns its record and its kept report keys.
    Host ids are taken before the GPU's; the host events are rewritten a batch at a time."""
    if files.viztracer is None:
        return _kineto_alone_rank(files, result, shift, ids, index, out)
    pid_map: dict[int, int] = {}
    tid_map: dict[int, int] = {}
    starts: set[int] = set()

    def rewrite(events: list) -> None:
        starts.update(_namespace_links(events, index))
        out.batch(rewrite_host_events(events, pid_map, tid_map, ids, shift))

    _, report_kept = read_batches(files.viztracer, rewrite)
    kept = _kept_objects(report_kept)
    sort_index = 2 * index
    main_pid = pid_map.get(result.host_pid) if result.host_pid is not None else None
    viz = VizInfo(files.viztracer, result.time_origin_unix_ns, result.viz_overflow,
                  pids=set(pid_map), tids=set(tid_map), main_pid=result.host_pid,
                  first_ts_ns=result.viz_first_ts_ns)
    main_tid = tid_map.get(viz.main_tid) if viz.main_tid is not None else None
    place = RankPlacement(result.alignment.offset_ns + shift, sort_index, shift, main_pid, main_tid)
    links = {scope_id: combined_link_id(index, scope_id) for scope_id in starts}
    gpu = build_rows(proton, flow_base(index)).serialise(place.proton_shift_ns, ids, links)
    placed = rank_events(files, viz, result.alignment, place, gpu)
    placed.result.link_starts = len(starts)
    out.pieces(host_process_events(placed.result.tag, sorted(pid_map.values()), main_pid, sort_index)
               + placed.events)
    record = placed.result.record() | {"warnings": list(result.warnings)}
    return record, kept


def _kineto_alone_rank(files, result, shift, ids, index, out: _EventWriter) -> tuple[dict, dict]:
    """A torch-profiler-only rank (:mod:`.kineto_alone`): its Python calls as the host process."""
    from tokentrace.merge.kineto_alone import read_kineto_alone

    side = read_kineto_alone(files)
    (old_pid,) = side.viz.pids
    pid = ids.take()
    tid_of = {tid: ids.take() for tid in sorted(side.viz.tids)}
    host = side.host().serialise(shift, pid, tid_of)
    viz = dataclasses.replace(side.viz, pids={old_pid}, main_pid=result.host_pid)
    place = RankPlacement(shift, 2 * index, shift, pid, tid_of.get(viz.main_tid))
    gpu = build_rows(side.trace.gpu, flow_base(index)).serialise(place.proton_shift_ns, ids)
    placed = rank_events(files, viz, result.alignment, place, gpu)
    host += host_process_events(placed.result.tag, [pid], pid, place.sort_index)
    out.pieces(host + placed.events)
    record = placed.result.record() | {"warnings": list(result.warnings)}
    return record, {}


def _namespace_links(events: list, index: int) -> set[int]:
    """Gives the rank's link starts their combined-file ids; returns their scope ids."""
    starts = set()
    for event in events:
        if event.get("name") == LINK_NAME and event.get("cat") == LINK_CATEGORY and event.get("ph") == "s":
            scope_id = event.get("id")
            if isinstance(scope_id, int) and not isinstance(scope_id, bool):
                starts.add(scope_id)
                event["id"] = combined_link_id(index, scope_id)
    return starts


def rewrite_host_events(events: list, pid_map: dict, tid_map: dict, ids: IdAllocator, shift_ns: int) -> bytes:
    """The host events with fresh pids/tids and shifted times, comma-separated (one dumps call).

    One ``orjson.dumps`` over the whole list, not one per event: each call allocates and frees
    its own output buffer (system time, per call), and a rank has ~10^5 events or more. Times
    are converted column-wise (one list per key, inlined conversions): a Python function call
    per value would cost more than the conversion it makes.
    """
    kept = [e for e in events if not (e.get("ph") == "M" and e.get("name") in _DROPPED_HOST_META)]
    _map_ids(kept, pid_map, tid_map, ids)
    timed = [e for e in kept if "ts" in e and e["ph"] != "M"]
    starts = [ns + shift_ns for ns in us_list_to_ns([e["ts"] for e in timed])]
    _put(timed, "ts", starts)
    lasting = [e for e in kept if "dur" in e]  # rounded to ns like ts: children end inside parents
    _put(lasting, "dur", us_list_to_ns([e["dur"] for e in lasting]))
    return orjson.dumps(kept)[1:-1] if kept else b""


def _map_ids(events: list, pid_map: dict, tid_map: dict, ids: IdAllocator) -> None:
    """Fresh pids and tids, taken in order of first appearance (pid before tid)."""
    for event in events:
        pid, tid = event.get("pid", 0), event.get("tid", 0)
        if pid not in pid_map:
            pid_map[pid] = ids.take()
        if tid not in tid_map:
            tid_map[tid] = ids.take()
        event["pid"], event["tid"] = pid_map[pid], tid_map[tid]


def _put(events: list, key: str, values_ns: list[int]) -> None:
    """Sets ``event[key]`` to the exact µs text of each value (an orjson fragment)."""
    for event, text in zip(events, map(orjson.Fragment, ns_list_to_us_text(values_ns))):
        event[key] = text
