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
from tokentrace.sources.vizscan import Scan

_START_RE = re.compile(rb'^\s*\{\s*"traceEvents"\s*:\s*\[')
# An unescaped quote only delimits strings, so this sequence can only be the key after the array.
_END_RE = re.compile(rb'\]\s*,\s*"viztracer_metadata"\s*:')


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
        has_events: at least one event was copied.
        kept: the report's ``viztracer_metadata`` and ``file_info`` top-level members as JSON
            text (``"viztracer_metadata": {...}, "file_info": {...}``), copied as they are into
            the merged file (vizviewer's source view reads ``file_info``); empty when absent.
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
    has_events: bool = False
    kept: bytes = dataclasses.field(default=b"", repr=False)

    @property
    def main_tid(self) -> int | None:
        """The launching thread: the main thread, whose tid equals the pid on Linux."""
        if self.main_pid in self.tids:
            return self.main_pid
        return min(self.tids) if self.tids else None


def copy_events(path: Path, sink: Callable[[bytes], None], also: Callable | None = None) -> VizInfo:
    """Writes the inside of ``traceEvents`` (without brackets) to ``sink``, chunk by chunk.

    Args:
        path: the VizTracer report, plain or gzip.
        sink: receives the event bytes (bytes or memoryview pieces, in order).
        also: called as ``also(data, start, end)`` with every copied range, then with the bytes
            after the events (the estimator's extraction reads the file once this way).

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
        return _copy_parsed(path, sink, also)
    info, scan = VizInfo(path), Scan(also)
    tail = _stream_body(head[start.end():], chunks, sink, scan)
    if tail is None:
        return _copy_parsed(path, sink, also)
    scan.fill(info)
    if also is not None:
        also(tail, 0, len(tail))
    _read_metadata(info, tail)
    return info


def _stream_body(carry: bytes, chunks: Iterator[bytes], sink, scan: Scan) -> bytes | None:
    """Copies events until the end marker; returns the bytes after it, or None if never found.

    Each chunk is cut after its last ``}`` (so no number or marker is split: the marker holds
    no ``}``) and handed on as a range, never sliced: only the joint of the previous chunk's
    rest and this chunk's first ``}`` is copied.
    """
    for chunk in chunks:
        first = chunk.find(b"}") + 1
        if not first:
            carry += chunk
            continue
        last = chunk.rfind(b"}") + 1
        joint = carry + chunk[:first]
        tail = _copy_until_end(joint, 0, len(joint), sink, scan)
        if tail is not None:
            return tail + chunk[first:] + b"".join(chunks)
        tail = _copy_until_end(chunk, first, last, sink, scan)
        if tail is not None:
            return tail + chunk[last:] + b"".join(chunks)
        carry = chunk[last:]
    return _copy_until_end(carry, 0, len(carry), sink, scan)


def _copy_until_end(data: bytes, start: int, end: int, sink, scan: Scan) -> bytes | None:
    """Copies ``data[start:end]`` up to the end marker; the bytes after it, None without it."""
    marker = _find_end(data, start, end)
    _copy_range(data, start, marker.start() if marker else end, sink, scan)
    return data[marker.end():end] if marker else None


def _copy_range(data: bytes, start: int, end: int, sink, scan: Scan) -> None:
    if end > start:
        scan.feed(data, start, end)
        sink(memoryview(data)[start:end] if start or end < len(data) else data)


def _find_end(data: bytes, start: int, end: int) -> re.Match | None:
    """The end marker ``], "viztracer_metadata":``: a fast ``find`` of the key, then the regex."""
    position = data.find(b'"viztracer_metadata"', start, end)
    while position >= 0:
        found = _END_RE.search(data, max(position - 64, start), position + 64)
        if found:
            return found
        position = data.find(b'"viztracer_metadata"', position + 1, end)
    return None


# The top-level keys of a report the merged file keeps (VizTracer writes them in this order).
KEPT_KEYS = ("viztracer_metadata", "file_info")


def _read_metadata(info: VizInfo, tail: bytes) -> None:
    """Reads what follows the events: the ``viztracer_metadata`` object (its value starts
    ``tail``), parsed, and with ``file_info`` after it kept as text for the merged file.

    VizTracer writes ``file_info`` last (source text, ~1 MB): it is copied, not parsed (parsing
    and writing it again cost ~4 % of a rank's merge). A tail with other keys (a merged file fed
    back) is parsed whole and only the two known keys kept.
    """
    body = tail.rstrip()
    body = body[:-1] if body.endswith(b"}") else body  # the report's own closing brace
    at = body.find(b'"file_info"')
    meta_text = (body[:at].rstrip().rstrip(b",") if at >= 0 else body).strip()
    try:
        metadata = orjson.loads(meta_text)
    except orjson.JSONDecodeError:
        metadata = None
    if not isinstance(metadata, dict) or b'"tokentrace"' in body or b'"displayTimeUnit"' in body:
        _read_metadata_parsed(info, tail)
        return
    info.kept = b'"viztracer_metadata": ' + meta_text + (b", " + body[at:].rstrip() if at >= 0 else b"")
    _apply_metadata(info, metadata)


def _read_metadata_parsed(info: VizInfo, tail: bytes) -> None:
    try:
        rest = orjson.loads(b'{"viztracer_metadata":' + tail)
    except orjson.JSONDecodeError:
        rest = None
    if not isinstance(rest, dict):  # an odd tail: the metadata alone
        try:
            metadata, _ = json.JSONDecoder().raw_decode(tail.decode("utf-8", "replace").lstrip())
        except ValueError:
            raise truncated_error(info.path, "its viztracer_metadata is cut or invalid") from None
        rest = {"viztracer_metadata": metadata}
    info.kept = kept_text({key: rest[key] for key in KEPT_KEYS if isinstance(rest.get(key), dict)})
    _apply_metadata(info, rest.get("viztracer_metadata"))


def kept_text(kept: dict) -> bytes:
    """Top-level members as JSON text, comma-separated (empty for none)."""
    return b", ".join(orjson.dumps(key) + b": " + orjson.dumps(value) for key, value in kept.items())


def _apply_metadata(info: VizInfo, metadata: object) -> None:
    if not isinstance(metadata, dict):
        return
    base = metadata.get("baseTimeNanoseconds")
    info.base_ns = int(base) if isinstance(base, (int, float)) else None
    info.overflow = bool(metadata.get("overflow", False))
    info.version = str(metadata.get("version", ""))


def _copy_parsed(path: Path, sink: Callable[[bytes], None], also: Callable | None = None) -> VizInfo:
    """Fallback for unexpected layouts: parse the whole report, write its events back."""
    doc = load_report(path)
    info, scan = VizInfo(path, streamed=False), Scan(also)
    events = doc["traceEvents"]
    body = b", ".join(orjson.dumps(event) for event in events)
    scan.feed(body.replace(b'":', b'": '))
    sink(body)
    scan.fill(info)
    info.kept = kept_text({key: doc[key] for key in KEPT_KEYS if isinstance(doc.get(key), dict)})
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
