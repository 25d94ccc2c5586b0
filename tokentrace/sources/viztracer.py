"""Reader of VizTracer reports that never parses the events.

A single-rank merge keeps the host events byte for byte, so this module copies the inside of the
``traceEvents`` array to a sink in chunks (gzip decompressed on the way) and keeps only what the
merge needs: the ``viztracer_metadata`` object that follows the array, the pids and tids used, and
the earliest ``ts``. Peak memory is a few chunks, whatever the size of the report. When the file
does not have the expected layout, it falls back to a full orjson parse.
"""

from __future__ import annotations

import codecs
import collections
import dataclasses
import json
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

from tokentrace.errors import InputError, TokentraceWarning
from tokentrace.sources.detect import TraceKind, mismatch_message, require_kind
from tokentrace.sources.fileio import feed_event_ranges, iter_chunks, read_all, truncated_error
from tokentrace.sources.vizcheck import check_report, first_bad_event, load_lenient
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
        not_utf8: strings of the copied events (names, argument keys and values) that held
            bytes that are not UTF-8, replaced by U+FFFD (:func:`warn_not_utf8` says so).
        not_utf8_more: there were more such strings than ``not_utf8`` (too many to count).
        launch_tid: the thread a GPU trace shows launching kernels (a torch-profiler trace
            alone: the one with the most CUDA runtime calls), ``None`` when none says.
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


def copy_events(path: Path, sink: Callable[[bytes], None], also: Callable | None = None) -> VizInfo:
    """Writes the inside of ``traceEvents`` (without brackets) to ``sink``, chunk by chunk.

    On the way, the scan checks what Perfetto would refuse in the copied bytes (NaN, text or
    ``1 2`` where a ts belongs ...; :mod:`.vizscan`, :mod:`.vizcheck`).

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
    chunks = iter_chunks(path)
    head = next(chunks, b"")
    start = _START_RE.match(head)
    if not start:
        return _copy_parsed(path, sink, also)
    info = VizInfo(path)
    scan = Scan(also, confirm=lambda offset: check_report(path))
    copier = _Copier(sink, scan)
    tail = _stream_body(head[start.end():], chunks, copier)
    after = copier.finish(path, tail is None)  # without the marker: what follows the array
    # warned by the caller (warn_not_utf8), once per rank
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


class _Copier:
    """Hands the event ranges to the scan and the sink, holding the last ~1 MiB back: a report
    without the ``viztracer_metadata`` key after its events (not VizTracer's own, which always
    writes it) is then cut where its array ends, and nothing after the array is copied."""

    HOLD_BYTES = 1 << 20

    def __init__(self, sink: Callable, scan: Scan) -> None:
        self.sink, self.scan = sink, scan
        self.held: collections.deque[tuple[bytes, int, int]] = collections.deque()
        self.held_bytes = 0
        self.replaced = 0  # strings whose bytes that are not UTF-8 were replaced
        self.more = False  # ... and more than that (too many bad bytes to count them all)

    def add(self, data: bytes, start: int, end: int) -> None:
        if end <= start:
            return
        self.held.append((data, start, end))
        self.held_bytes += end - start
        while self.held_bytes - (self.held[0][2] - self.held[0][1]) >= self.HOLD_BYTES:
            self._release(*self.held.popleft())

    def _release(self, data: bytes, start: int, end: int) -> None:
        self.held_bytes -= end - start
        self.scan.feed(data, start, end)
        if not data.isascii():  # a pass in C, no copy; ranges start and end at "}": whole characters
            fixed = _valid_utf8(data[start:end])
            if fixed is not None:
                data, strings = fixed
                self.replaced += abs(strings)
                self.more |= strings < 0
                start, end = 0, len(data)
        self.sink(memoryview(data)[start:end] if start or end < len(data) else data)

    def finish(self, path: Path, unmarked: bool) -> bytes:
        """Copies what is held; ``unmarked``: first cuts it at the end of the array and returns
        the bytes after its ``]`` (else ``b""``).

        Raises:
            InputError: the array never closes (the file is cut).
        """
        if not unmarked:
            while self.held:
                self._release(*self.held.popleft())
            return b""
        rest = b"".join(data[start:end] for data, start, end in self.held)
        self.held.clear()
        self.held_bytes = 0
        found = _split_array_end(rest)
        if found is None:
            raise truncated_error(path, "its traceEvents array is not closed")
        events, after = found
        if events.strip():
            self.held_bytes += len(events)
            self._release(events, 0, len(events))
        return after


# Bad sequences whose strings are counted per copied range (a report of nothing but bad bytes
# would otherwise cost a Python step each: minutes for 55 MB); past it the count is a floor.
_BAD_SEQUENCES_LOOKED_AT = 4096
_WINDOW_BYTES = 16 << 10  # decoded at a time while they are looked for (a copy of each)


def _valid_utf8(data: bytes) -> tuple[bytes, int] | None:
    """``data`` with every byte that is not UTF-8 replaced by U+FFFD (as the parsed paths do:
    :func:`~tokentrace.sources.vizcheck.load_lenient`) and the number of strings that held such
    bytes, or None when it is valid: copied raw, such bytes (a name VizTracer took from a file
    name or a C string) made the merged file invalid JSON, with exit 0.

    Each bad sequence is found by the decoder, a window at a time from the previous one on;
    two belong to one string when no quote lies between them."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        position = exc.start
    else:
        return None
    strings, last, looked = 0, -1, 0
    while position < len(data):
        window = data[position:position + _WINDOW_BYTES]
        try:
            used = codecs.utf_8_decode(window, "strict", False)[1]
        except UnicodeDecodeError as exc:
            bad, position = position + exc.start, position + exc.end
        else:
            if used:  # valid up to there (a sequence cut by the window's end comes next)
                position += used
                continue
            bad, position = position, len(data)  # a sequence cut by the data's end
        if last < 0 or data.find(b'"', last, bad) >= 0:
            strings += 1
        last, looked = bad, looked + 1
        if looked == _BAD_SEQUENCES_LOOKED_AT and position < len(data):
            strings = -strings  # more than counted: the warning says "more than"
            break
    return data.decode("utf-8", "replace").encode("utf-8"), strings


def warn_not_utf8(info: VizInfo) -> None:
    """Warns, when the copy replaced bytes that are not UTF-8, how many strings of which report
    it changed. Called by the merge with the copy's result (a forked child's warnings would be
    lost; :attr:`VizInfo.not_utf8` comes back with the result)."""
    if info.not_utf8:
        count = info.not_utf8
        many = "more than " if info.not_utf8_more else ""
        warnings.warn(
            f"{info.path}: {many}{count} event string{'s' if count > 1 or many else ''} (names, "
            "arguments) held "
            "bytes that are not UTF-8; they were replaced by U+FFFD in the merged trace (fix the "
            "names at their source to keep them)", TokentraceWarning, stacklevel=2)


def _split_array_end(rest: bytes, tries: int = 64) -> tuple[bytes, bytes] | None:
    """``rest`` split at the ``]`` that closes the events: the bytes before it and after it
    (``}`` or more members, ``, "key": value ...}``); None when no ``]`` closes the object."""
    position = len(rest)
    for _ in range(tries):
        position = rest.rfind(b"]", 0, position)
        if position < 0:
            return None
        after = rest[position + 1:]
        text = after.strip()
        if text == b"}":
            return rest[:position], after
        if text.startswith(b","):
            try:
                if isinstance(orjson.loads(b"{" + text[1:]), dict):
                    return rest[:position], after
            except orjson.JSONDecodeError:
                pass
    return None


def _read_rest(info: VizInfo, after: bytes) -> None:
    """The members after the events of a report without ``viztracer_metadata`` (``after`` is
    ``}`` or ``, "key": value ...}``): the kept keys, and a merged trace refused."""
    text = after.strip()
    members = orjson.loads(b"{" + text[1:]) if text.startswith(b",") else {}
    if isinstance(members.get("tokentrace"), dict):
        raise InputError(mismatch_message(info.path, TraceKind.VIZTRACER, TraceKind.MERGED))
    info.kept = kept_text({key: members[key] for key in KEPT_KEYS if isinstance(members.get(key), dict)})


def _stream_body(carry: bytes, chunks: Iterator[bytes], copier: _Copier) -> bytes | None:
    """Copies events until the end marker; returns the bytes after it, or None if never found.

    The chunks are cut after a ``}`` (:func:`~tokentrace.sources.fileio.feed_event_ranges`), so
    no number or marker is split (the marker holds no ``}``), and handed on as ranges.
    """
    return feed_event_ranges(chunks, lambda data, start, end: _copy_until_end(data, start, end, copier), carry)


def _copy_until_end(data: bytes, start: int, end: int, copier: _Copier) -> bytes | None:
    """Copies ``data[start:end]`` up to the end marker; the bytes after it, None without it."""
    marker = _find_end(data, start, end)
    copier.add(data, start, marker.start() if marker else end)
    return data[marker.end():end] if marker else None


# ``]`` found before the search switches to the key (the events hold few ``]``, if any).
_BRACKET_HITS = 64


def _find_end(data: bytes, start: int, end: int) -> re.Match | None:
    """The end marker ``], "viztracer_metadata":``: found through its ``]`` (``bytes.find`` of
    one byte is memchr, vectorised, where a find of the key compares it window by window), or
    where the events hold many ``]``, through the key, then the regex."""
    position = data.find(b"]", start, end)
    for _ in range(_BRACKET_HITS):
        if position < 0:
            return None
        found = _END_RE.match(data, position, end)
        if found:
            return found
        position = data.find(b"]", position + 1, end)
    if position < 0:
        return None
    position = data.find(b'"viztracer_metadata"', max(position - 64, start), end)
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
    return doc
