"""Index and copy of a VizTracer report, its events never parsed (the fast path).

A single-rank merge keeps the host events byte for byte, so the copy hands the inside of the
``traceEvents`` array to a sink in chunks (gzip inflated on the way; :mod:`.copy`) and keeps only
what the merge needs (:class:`VizInfo`): the ``viztracer_metadata`` object that follows the
array, the pids and tids used and the earliest ``ts`` (:mod:`.scan`). Peak memory is a few
chunks, whatever the size of the report. A report in an unexpected layout, or any report with
``RawOptions(fast_path=False)`` in force (:mod:`tokentrace.sources.backend`), takes the fallback: a full orjson parse, its events written back.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Callable
from pathlib import Path

import orjson

from tokentrace.errors import InputError, TokentraceWarning
from tokentrace.sources import backend
from tokentrace.sources._raw.check import check_report
from tokentrace.sources._raw.copy import START_RE, Copier, stream_body, valid_utf8
from tokentrace.sources._raw.scan import Scan
from tokentrace.sources.detect import TraceKind, mismatch_message, require_kind
from tokentrace.sources.event_fields import KEPT_KEYS, first_bad_event, kept_text, load_lenient
from tokentrace.sources.fileio import iter_chunks, read_all, truncated_error


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
        not_utf8: strings of the copied events (names, argument keys and values) that held
            bytes that are not UTF-8, replaced by U+FFFD (:meth:`warn_not_utf8` says so).
        not_utf8_more: there were more such strings than ``not_utf8`` (too many to count).
        launch_tid: the thread a GPU trace shows launching kernels (a torch-profiler trace
            alone: the one with the most CUDA runtime calls), ``None`` when none says.
        checked_whole: the copy's scan met a suspect its own event did not clear, so the whole
            report was parsed to check it (and found sound).
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
    not_utf8: int = 0
    not_utf8_more: bool = False
    kept: bytes = dataclasses.field(default=b"", repr=False)
    launch_tid: int | None = None
    checked_whole: bool = False

    @property
    def main_tid(self) -> int | None:
        """The launching thread as far as the host file says: :attr:`launch_tid` when a GPU
        trace named it, else the main thread, whose tid equals the pid on Linux. (The queries
        look for launch evidence on every thread first: ``tokentrace.ranks``.)"""
        if self.launch_tid in self.tids:
            return self.launch_tid
        if self.main_pid in self.tids:
            return self.main_pid
        return min(self.tids) if self.tids else None

    def warn_not_utf8(self) -> None:
        """Warns, when the copy replaced bytes that are not UTF-8, how many strings of which
        report it changed. Called by the merge with the copy's result (a forked child's warnings
        would be lost; :attr:`not_utf8` comes back with the result)."""
        if self.not_utf8:
            count = self.not_utf8
            many = "more than " if self.not_utf8_more else ""
            warnings.warn(
                f"{self.path}: {many}{count} event string{'s' if count > 1 or many else ''} (names, "
                "arguments) held "
                "bytes that are not UTF-8; they were replaced by U+FFFD in the merged trace (fix the "
                "names at their source to keep them)", TokentraceWarning, stacklevel=2)


def index_report(path: Path) -> VizInfo:
    """What the merge needs to know about the VizTracer report at ``path`` (plain or gzip): its
    metadata, kept top-level members, pids, tids and earliest time, checked as
    :func:`copy_events` checks them, the events written nowhere.

    Raises:
        InputError: as :func:`copy_events`.
    """
    return copy_events(path, _discard)


def _discard(data) -> None:
    pass


def copy_events(path: Path, sink: Callable[[bytes], None], also: Callable | None = None) -> VizInfo:
    """Writes the inside of ``traceEvents`` (without brackets) to ``sink``, chunk by chunk.

    On the way, the scan checks what Perfetto would refuse in the copied bytes (NaN, text or
    ``1 2`` where a ts belongs ...; :mod:`.scan`, :mod:`.check`).

    Args:
        path: the VizTracer report, plain or gzip.
        sink: receives the event bytes (bytes or memoryview pieces, in order).
        also: called as ``also(data, start, end)`` with every copied range, then with the bytes
            after the events (the estimator's extraction reads the file once this way).

    Returns:
        The report's metadata and the ids and earliest time seen in the events.

    Raises:
        InputError: missing, not JSON, truncated, still being written, a Proton trace, a
            merged trace, or an event Perfetto cannot load (named by its index).
    """
    require_kind(path, TraceKind.VIZTRACER)
    options = backend.current()  # the fast path's switch and sizes
    if not options.fast_path:
        return _copy_parsed(path, sink, also)
    chunks = iter_chunks(path, options.chunk_bytes)
    head = next(chunks, b"")
    start = START_RE.match(head)
    if not start:
        return _copy_parsed(path, sink, also)
    info = VizInfo(path)
    scan = Scan(also, confirm=lambda offset: check_report(path))
    copier = Copier(sink, scan, options.hold_bytes)
    tail = stream_body(head[start.end():], chunks, copier)
    after = copier.finish(path, tail is None)  # without the marker: what follows the array
    # warned by the caller (VizInfo.warn_not_utf8), once per rank
    info.not_utf8, info.not_utf8_more = copier.replaced, copier.more
    scan.fill(info)
    rest = tail if tail is not None else after
    if also is not None:
        also(rest, 0, len(rest))
    if tail is None:
        _read_rest(info, after)
    else:
        _read_metadata(info, tail)
    return info


def _read_rest(info: VizInfo, after: bytes) -> None:
    """The members after the events of a report without ``viztracer_metadata`` (``after`` is
    ``}`` or ``, "key": value ...}``): the kept keys, and a merged trace refused."""
    text = after.strip()
    members = orjson.loads(b"{" + text[1:]) if text.startswith(b",") else {}
    if isinstance(members.get("tokentrace"), dict):
        raise InputError(mismatch_message(info.path, TraceKind.VIZTRACER, TraceKind.MERGED))
    info.kept = kept_text({key: members[key] for key in KEPT_KEYS if isinstance(members.get(key), dict)})


def _read_metadata(info: VizInfo, tail: bytes) -> None:
    """Reads what follows the events: the ``viztracer_metadata`` object (its value starts
    ``tail``), parsed, and with ``file_info`` after it kept as text for the merged file.

    VizTracer writes ``file_info`` last (source text, ~1 MB): it is copied, not parsed (a parse
    would make every source line a string only to write it back unchanged). A tail with other
    keys (a merged file fed back) is parsed whole and only the two known keys kept.
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
    if at >= 0:
        _check_copied_members(info.path, body[at:].rstrip())
    info.kept = b'"viztracer_metadata": ' + meta_text + (b", " + body[at:].rstrip() if at >= 0 else b"")
    _apply_metadata(info, metadata)


def _check_copied_members(path: Path, text: bytes) -> None:
    """Checks the members copied as text (``"file_info": {...}``, ~1 MB) at the cost of a few
    counts: balanced braces and brackets, ending in ``}``; else it is parsed, and a member that
    does not parse (a cut file) is an error.

    Raises:
        InputError: the members are not JSON.
    """
    balanced = (text.endswith(b"}") and text.count(b"{") == text.count(b"}")
                and text.count(b"[") == text.count(b"]"))
    if balanced:
        return
    try:
        orjson.loads(b"{" + text + b"}")
    except orjson.JSONDecodeError as exc:
        raise truncated_error(path, f"its file_info is cut or invalid ({exc.msg})") from None


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
    if isinstance(rest.get("tokentrace"), dict):  # a merged trace fed back
        raise InputError(mismatch_message(info.path, TraceKind.VIZTRACER, TraceKind.MERGED))
    info.kept = kept_text({key: rest[key] for key in KEPT_KEYS if isinstance(rest.get(key), dict)})
    _apply_metadata(info, rest.get("viztracer_metadata"))


def _apply_metadata(info: VizInfo, metadata: object) -> None:
    if not isinstance(metadata, dict):
        return
    base = metadata.get("baseTimeNanoseconds")
    info.base_ns = int(base) if isinstance(base, (int, float)) else None
    info.overflow = bool(metadata.get("overflow", False))
    info.version = str(metadata.get("version", ""))


def _copy_parsed(path: Path, sink: Callable[[bytes], None], also: Callable | None = None) -> VizInfo:
    """Fallback for unexpected layouts: parse the whole report, write its events back."""
    doc, replaced = load_report(path)
    info, scan = VizInfo(path, streamed=False), Scan(also)
    # warned by the caller, as the copy's count is (strings anywhere in the report, here)
    info.not_utf8, info.not_utf8_more = abs(replaced), replaced < 0
    events = doc["traceEvents"]
    body = b", ".join(orjson.dumps(event) for event in events)
    scan.feed(body.replace(b'":', b'": '))
    sink(body)
    scan.fill(info)
    info.kept = kept_text({key: doc[key] for key in KEPT_KEYS if isinstance(doc.get(key), dict)})
    _apply_metadata(info, doc.get("viztracer_metadata"))
    return info


def load_report(path: Path) -> tuple[dict, int]:
    """Parses a whole VizTracer report (the fallback); returns it and the number of its strings
    that held bytes that are not UTF-8, replaced by U+FFFD (negative: more than that many).

    Raises:
        InputError: missing, not JSON, truncated, still being written, or a Proton trace.
    """
    from tokentrace.sources.proton import json_error

    raw = read_all(path)
    fixed = valid_utf8(raw)
    try:
        doc = load_lenient(raw)  # names that are not UTF-8 load (Perfetto takes them)
    except orjson.JSONDecodeError as exc:
        raise json_error(path, raw, exc) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError(f"{path}: no 'traceEvents' list; this is not a VizTracer report")
    if isinstance(doc.get("tokentrace"), dict):
        raise InputError(mismatch_message(path, TraceKind.VIZTRACER, TraceKind.MERGED))
    if "baseTimeNanoseconds" in doc or any(e.get("cat") == "kernel" for e in doc["traceEvents"][:100] if isinstance(e, dict)):
        raise InputError(mismatch_message(path, TraceKind.VIZTRACER, TraceKind.PROTON))
    bad = first_bad_event(doc["traceEvents"])
    if bad is not None:
        raise InputError(f"{path}: traceEvents[{bad[0]}] {bad[1]}; Perfetto cannot load it; "
                         "re-record the report, or repair or delete that event, then merge again")
    return doc, 0 if fixed is None else fixed[1]
