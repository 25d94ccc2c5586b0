"""A VizTracer report's events in parsed batches of whole events, for ``--combine``.

``--combine`` rewrites every host event (fresh pids and tids, shifted times), so it parses
them; it does so a batch at a time, from the same raw copy the per-rank merge makes
(:func:`~tokentrace.sources._raw.copy_events`, with its checks), so memory is one batch
(~2 MB of JSON, ~10x that parsed), not the whole report parsed at once (~10x a report of
hundreds of MB); the output is the same bytes either way.

A batch ends at an event boundary: the last ``}`` followed by ``,`` and ``{`` in the bytes
held, confirmed by parsing the batch (a ``}, {`` inside a string, or after a nested object,
makes the parse fail, and the boundary before it is tried).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import orjson

from tokentrace.errors import InputError
from tokentrace.sources._raw import VizInfo, copy_events
from tokentrace.sources.event_fields import first_bad_event, load_lenient

BATCH_BYTES = 2 << 20
_BOUNDARY_RE = re.compile(rb"\}\s*,\s*\{")
_TRIES = 32  # failed parses per batch before more bytes are read


def _quotes(data: bytes, start: int, end: int) -> int:
    """The quotes in ``data[start:end]`` that open or close a string (``\\"`` excluded; an
    escaped backslash before a quote is miscounted: the parse then fails, and costs a try)."""
    return data.count(b'"', start, end) - data.count(b'\\"', start, end)


def read_batches(path: Path, handle: Callable[[list], None], batch_bytes: int = BATCH_BYTES) -> tuple[VizInfo, dict]:
    """Calls ``handle(events)`` with the report's events, in order, a batch at a time.

    Returns:
        The report's :class:`VizInfo` and its kept top-level members (``viztracer_metadata``,
        ``file_info``) parsed.

    Raises:
        InputError: as :func:`copy_events`, and an event that is not JSON or no object (named
            by its index).
    """
    batches = _Batches(path, handle, batch_bytes)
    info = copy_events(path, batches.add)
    batches.finish()
    kept = load_lenient(b"{" + info.kept + b"}") if info.kept else {}
    return info, kept


class _Batches:
    def __init__(self, path: Path, handle: Callable[[list], None], batch_bytes: int) -> None:
        self.path, self.handle, self.batch_bytes = path, handle, batch_bytes
        self.parts: list = []
        self.size = 0
        self.first_index = 0  # the index in traceEvents of the next batch's first event

    def add(self, data) -> None:
        self.parts.append(data)
        self.size += len(data)
        if self.size >= self.batch_bytes:
            held = b"".join(self.parts)
            self.parts, self.size = [], 0
            rest = self._take_whole_events(held)
            if rest:
                self.parts, self.size = [rest], len(rest)

    def finish(self) -> None:
        held = b"".join(self.parts).strip()
        self.parts, self.size = [], 0
        if held:
            try:
                events = load_lenient(b"[" + held + b"]")
            except orjson.JSONDecodeError as exc:
                raise InputError(f"{self.path}: the events from traceEvents[{self.first_index}] on are "
                                 f"not valid JSON ({exc.msg}); re-record the report, or repair it, "
                                 "then merge again") from None
            self._hand(events)

    def _take_whole_events(self, held: bytes) -> bytes:
        """Hands on ``held``'s whole events in batches of about ``batch_bytes``; returns the
        bytes left (the copy hands on chunks of ~4 MiB, so one chunk may make several batches)."""
        start, window = 0, self.batch_bytes
        while len(held) - start >= window:
            end = self._hand_batch(held, start, start + window)
            if end is None:  # no boundary in this window (an event larger than it): twice it
                window *= 2
                continue
            start, window = end, self.batch_bytes
        return held[start:]

    def _hand_batch(self, held: bytes, start: int, end: int) -> int | None:
        """Hands on the events from ``start`` to the last boundary before ``end``; returns where
        the next event starts, None when no boundary was found.

        A ``}`` after an odd number of (unescaped) quotes since ``start`` (an event's start:
        outside any string) is inside a string and skipped without a parse: a report whose
        args reprs hold ``}, {`` would otherwise cost a failed parse of the window each. The
        quotes are counted once over the window, backwards between candidates."""
        position, quotes_before = end, _quotes(held, start, end)
        tries = _TRIES
        while tries:
            previous, position = position, held.rfind(b"}", start, position)
            if position < 0:
                return None
            quotes_before -= _quotes(held, position, previous)
            if quotes_before % 2:
                continue
            boundary = _BOUNDARY_RE.match(held, position)
            if boundary is None:
                continue
            try:
                events = load_lenient(b"[" + held[start:position + 1] + b"]")
            except orjson.JSONDecodeError:
                tries -= 1
                continue  # after an inner object (or a miscounted escape): an earlier one
            self._hand(events)
            return boundary.end() - 1
        return None

    def _hand(self, events: list) -> None:
        bad = first_bad_event(events)
        if bad is not None:
            raise InputError(f"{self.path}: traceEvents[{self.first_index + bad[0]}] {bad[1]}; Perfetto "
                             "cannot load it; re-record the report, or repair or delete that event, "
                             "then merge again")
        self.first_index += len(events)
        self.handle(events)
