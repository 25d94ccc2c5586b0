"""The copy: the inside of a report's ``traceEvents`` array handed on byte for byte, in ranges
that end after a ``}``, each fed to the scan (:mod:`.scan`) on its way to the sink.

The end of the array is found by its marker (``], "viztracer_metadata":``), or, in a report
without that key, by holding the last bytes back (:class:`Copier`) and cutting them where the
array closes. Bytes that are not UTF-8 are replaced on the way (:func:`valid_utf8`).
"""

from __future__ import annotations

import codecs
import collections
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

from tokentrace.sources._raw.scan import Scan
from tokentrace.sources.fileio import feed_event_ranges, truncated_error

START_RE = re.compile(rb'^\s*\{\s*"traceEvents"\s*:\s*\[')
# An unescaped quote only delimits strings, so this sequence can only be the key after the array.
_END_RE = re.compile(rb'\]\s*,\s*"viztracer_metadata"\s*:')


class Copier:
    """Hands the event ranges to the scan and the sink, holding the last ~1 MiB back: a report
    without the ``viztracer_metadata`` key after its events (not VizTracer's own, which always
    writes it) is then cut where its array ends, and nothing after the array is copied
    (``hold_bytes``: :attr:`~tokentrace.options.RawOptions.hold_bytes`)."""

    def __init__(self, sink: Callable, scan: Scan, hold_bytes: int) -> None:
        self.sink, self.scan, self.hold_bytes = sink, scan, hold_bytes
        self.held: collections.deque[tuple[bytes, int, int]] = collections.deque()
        self.held_bytes = 0
        self.replaced = 0  # strings whose bytes that are not UTF-8 were replaced
        self.more = False  # ... and more than that (too many bad bytes to count them all)

    def add(self, data: bytes, start: int, end: int) -> None:
        if end <= start:
            return
        self.held.append((data, start, end))
        self.held_bytes += end - start
        while self.held_bytes - (self.held[0][2] - self.held[0][1]) >= self.hold_bytes:
            self._release(*self.held.popleft())

    def _release(self, data: bytes, start: int, end: int) -> None:
        self.held_bytes -= end - start
        self.scan.feed(data, start, end)
        if not data.isascii():  # a pass in C, no copy; ranges start and end at "}": whole characters
            fixed = valid_utf8(data[start:end])
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


def valid_utf8(data: bytes) -> tuple[bytes, int] | None:
    """``data`` with every byte that is not UTF-8 replaced by U+FFFD (as the parsed paths do:
    :func:`~tokentrace.sources.event_fields.load_lenient`) and the number of strings that held such
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


def stream_body(carry: bytes, chunks: Iterator[bytes], copier: Copier) -> bytes | None:
    """Copies events until the end marker; returns the bytes after it, or None if never found.

    The chunks are cut after a ``}`` (:func:`~tokentrace.sources.fileio.feed_event_ranges`), so
    no number or marker is split (the marker holds no ``}``), and handed on as ranges.
    """
    return feed_event_ranges(chunks, lambda data, start, end: _copy_until_end(data, start, end, copier), carry)


def _copy_until_end(data: bytes, start: int, end: int, copier: Copier) -> bytes | None:
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
