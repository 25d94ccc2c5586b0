"""Reader of VizTracer reports that never parses the events.

A single-rank merge keeps the host events byte for byte, so this module copies the inside of the
``traceEvents`` array to a sink in chunks (gzip decompressed on the way) and keeps only what the
merge needs: the ``viztracer_metadata`` object that follows the array, the pids and tids used, and
the earliest ``ts``. Peak memory is a few chunks, whatever the size of the report. When the file
does not have the expected layout, it falls back to a full orjson parse.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

from tokentrace.errors import InputError
from tokentrace.sources.detect import TraceKind, mismatch_message, require_kind
from tokentrace.sources.fileio import iter_chunks, read_all, truncated_error
from tokentrace.units import us_to_ns

_START_RE = re.compile(rb'^\s*\{\s*"traceEvents"\s*:\s*\[')
# An unescaped quote only delimits strings, so this sequence can only be the key after the array.
_END_RE = re.compile(rb'\]\s*,\s*"viztracer_metadata"\s*:')
_PID_RE = re.compile(rb'"pid":\s*(\d+)')
_TID_RE = re.compile(rb'"tid":\s*(\d+)')
_TS_INT_RE = re.compile(rb'"ts":\s*(\d+)')
_TS_AT_RE = re.compile(rb'.*"ts":\s*(\d+(?:\.\d+)?)[,}\s]', re.S)
_META_RE = re.compile(rb'"ph":\s*"M",\s*"pid":\s*(\d+),\s*"tid":\s*(\d+)')
_KEEP_BYTES = 256  # held back between chunks so the end marker cannot be split


@dataclasses.dataclass
class VizInfo:
    """What the merge needs from a VizTracer report besides its events.

    Attributes:
        path: the report.
        base_ns: ``baseTimeNanoseconds`` (REALTIME - MONOTONIC, ns), ``None`` when absent.
        overflow: VizTracer's ring buffer wrapped: the earliest host events are missing.
        version: the VizTracer version that wrote the report (``""`` when unknown).
        pids: every ``pid`` of the events.
        tids: every ``tid`` of the events.
        main_pid: pid of the first event (the profiled process).
        first_ts_ns: earliest ``ts`` of any event, ``None`` without events.
        streamed: True when the events were copied without parsing.
    """

    path: Path
    base_ns: int | None = None
    overflow: bool = False
    version: str = ""
    pids: set[int] = dataclasses.field(default_factory=set)
    tids: set[int] = dataclasses.field(default_factory=set)
    main_pid: int | None = None
    first_ts_ns: int | None = None
    streamed: bool = True

    @property
    def main_tid(self) -> int | None:
        """The launching thread: the main thread, whose tid equals the pid on Linux."""
        if self.main_pid in self.tids:
            return self.main_pid
        return min(self.tids) if self.tids else None


class _Scan:
    """Collects pids, tids and the earliest ts over the copied bytes with a few C-level scans.

    pids and tids come from VizTracer's metadata events (it writes a ``process_name`` and a
    ``thread_name`` for every process and thread it traced); a report without them falls back to
    scanning every ``"pid":``/``"tid":``.
    """

    def __init__(self) -> None:
        self.ids: list[tuple[bytes, bytes]] = []
        self.pids: set[bytes] = set()
        self.tids: set[bytes] = set()
        self.stamps: list[bytes] = []  # the smallest ts text of each fed range
        self.marker: bytes | None = None  # what every metadata event contains

    def feed(self, data: bytes) -> None:
        if self.marker is None:  # VizTracer writes json.dumps' '": ' separators; else no shortcut
            self.marker = b'"ph": "M"' if b'"ph": "' in data and b'"ph":"' not in data else b""
        if data.find(self.marker) >= 0:  # M events are few: skip the regex on chunks without
            self.ids.extend(_META_RE.findall(data))
        if not self.ids:  # no metadata events (yet): scan every id, slower but complete
            self.pids.update(_PID_RE.findall(data))
            self.tids.update(_TID_RE.findall(data))
        # a full scan: VizTracer writes an event when it ends, so the earliest start (the
        # outermost call) is near the end of the file, not the beginning (measured: t39_tp2)
        whole = _TS_INT_RE.findall(data)
        if whole:
            self.stamps.append(_smallest_ts(data, whole))

    def fill(self, info: VizInfo) -> None:
        if self.ids:
            self.pids = {pid for pid, _ in self.ids}
            self.tids = {tid for _, tid in self.ids}
            info.main_pid = int(self.ids[0][0])
        info.pids = {int(p) for p in self.pids}
        info.tids = {int(t) for t in self.tids}
        if info.main_pid is None and info.pids:
            info.main_pid = min(info.pids)
        stamps = [us_to_ns(text.decode()) for text in self.stamps]
        info.first_ts_ns = min(stamps) if stamps else None


def _smallest_ts(data: bytes, whole: list[bytes]) -> bytes:
    """The smallest ``ts`` text in ``data``, given the integer parts of all its ``ts`` values."""
    shortest = len(min(whole, key=len))
    if len(max(whole, key=len)) == shortest:
        low = min(whole)  # same digit count: byte order is numeric order
    else:
        low = str(min(map(int, whole))).encode()
    exact = []
    position = data.find(low)
    while position >= 0:  # the few places holding that integer part: find, not a regex pass
        found = _TS_AT_RE.match(data, max(position - 16, 0), position + len(low) + 40)
        if found and found.start(1) == position:
            exact.append(found.group(1))
        position = data.find(low, position + 1)
    return min(exact, key=float) if exact else low


def copy_events(path: Path, sink: Callable[[bytes], None]) -> VizInfo:
    """Writes the inside of ``traceEvents`` (without brackets) to ``sink``, chunk by chunk.

    Returns:
        The report's metadata and the ids and earliest time seen in the events.

    Raises:
        InputError: missing, not JSON, truncated, still being written, or a Proton trace.
    """
    require_kind(path, TraceKind.VIZTRACER)
    chunks = iter_chunks(path)
    head = next(chunks, b"")
    start = _START_RE.match(head)
    if not start:
        return _copy_parsed(path, sink)
    info, scan = VizInfo(path), _Scan()
    tail = _stream_body(head[start.end():], chunks, sink, scan)
    if tail is None:
        return _copy_parsed(path, sink)
    scan.fill(info)
    _read_metadata(info, tail)
    return info


def _stream_body(pending: bytes, chunks: Iterator[bytes], sink, scan: _Scan) -> bytes | None:
    """Copies events until the end marker; returns the bytes after it, or None if never found."""
    while True:
        end = _find_end(pending)
        if end:
            scan.feed(pending[: end.start()])
            sink(pending[: end.start()])
            return pending[end.end():] + b"".join(chunks)
        following = next(chunks, None)
        if following is None:
            return None
        # cut after a '}' so no number is split; the rest is searched again with the next chunk
        cut = pending.rfind(b"}", 0, max(len(pending) - _KEEP_BYTES, 0)) + 1
        scan.feed(pending[:cut])
        sink(pending[:cut])
        pending = pending[cut:] + following


def _find_end(data: bytes) -> re.Match | None:
    """The end marker ``], "viztracer_metadata":``: a fast ``find`` of the key, then the regex."""
    position = data.find(b'"viztracer_metadata"')
    while position >= 0:
        end = _END_RE.search(data, max(position - 64, 0), position + 64)
        if end:
            return end
        position = data.find(b'"viztracer_metadata"', position + 1)
    return None


def _read_metadata(info: VizInfo, tail: bytes) -> None:
    """Parses the ``viztracer_metadata`` object at the start of ``tail`` (the rest is ignored)."""
    try:
        metadata, _ = json.JSONDecoder().raw_decode(tail.decode("utf-8", "replace").lstrip())
    except ValueError:
        raise truncated_error(info.path, "its viztracer_metadata is cut or invalid") from None
    _apply_metadata(info, metadata)


def _apply_metadata(info: VizInfo, metadata: object) -> None:
    if not isinstance(metadata, dict):
        return
    base = metadata.get("baseTimeNanoseconds")
    info.base_ns = int(base) if isinstance(base, (int, float)) else None
    info.overflow = bool(metadata.get("overflow", False))
    info.version = str(metadata.get("version", ""))


def _copy_parsed(path: Path, sink: Callable[[bytes], None]) -> VizInfo:
    """Fallback for unexpected layouts: parse the whole report, write its events back."""
    doc = load_report(path)
    info, scan = VizInfo(path, streamed=False), _Scan()
    events = doc["traceEvents"]
    body = b", ".join(orjson.dumps(event) for event in events)
    scan.feed(body.replace(b'":', b'": '))
    sink(body)
    scan.fill(info)
    _apply_metadata(info, doc.get("viztracer_metadata"))
    return info


def load_report(path: Path) -> dict:
    """Parses a whole VizTracer report (used by the fallback and by ``--combine``).

    Raises:
        InputError: missing, not JSON, truncated, still being written, or a Proton trace.
    """
    from tokentrace.sources.proton import json_error

    raw = read_all(path)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise json_error(path, raw, exc) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError(f"{path}: no 'traceEvents' list; this is not a VizTracer report")
    if "baseTimeNanoseconds" in doc or any(e.get("cat") == "kernel" for e in doc["traceEvents"][:100] if isinstance(e, dict)):
        raise InputError(mismatch_message(path, TraceKind.VIZTRACER, TraceKind.PROTON))
    return doc
