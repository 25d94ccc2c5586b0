"""A large Proton trace read piece by piece, so that no dict per event outlives its piece.

``orjson.loads`` of a whole trace holds one dict (with its args dict, call-stack list and
strings) per event: ~1 KB each, 2 GB for 2 M tiny kernels. Above :data:`PIECEWISE_BYTES`, the
``traceEvents`` array is cut at event boundaries (``},{``) into pieces of ~4 MiB, each parsed
alone, and every event's keys but its times and ids are interned (:class:`Interner`: one shared
dict for all the launches of one kernel from one call stack), so what is kept per event is its
:class:`~tokentrace.sources.proton.ProtonEvent`. When a cut does not give JSON (a string or a
nested list holding ``},{``), or the file is not of that shape, the reader parses it whole: the
pieces are a shortcut, never a second grammar.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import orjson

PIECEWISE_BYTES = 32 << 20
PIECE_BYTES = 4 << 20
# Keys that differ from launch to launch, read into columns before the rest is interned.
VOLATILE_KEYS = frozenset({"ts", "dur", "pid", "tid"})
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


class NotPiecewise(Exception):
    """A piece did not parse: read the file whole instead."""


def split_document(raw: bytes) -> tuple[dict, int, int] | None:
    """``(every top-level member but traceEvents, start, end)`` where ``raw[start:end]`` is the
    inside of the ``traceEvents`` brackets; None when ``raw`` is not one object from which the
    array can be cut out this way."""
    found = _EVENTS_KEY.search(raw)
    if found is None or not raw.lstrip().startswith(b"{"):
        return None
    end = raw.rstrip().rfind(b"]")
    if end < found.end():
        return None
    before = raw[:found.start()].rstrip()
    after = raw[end + 1:].strip()
    head = (before[:-1] if before.endswith(b",") else before) + b"}"
    tail = b"{" + after[1:] if after.startswith(b",") else after
    try:
        header = orjson.loads(head)
        rest = orjson.loads(tail) if tail != b"}" else {}
    except orjson.JSONDecodeError:
        return None
    if not isinstance(header, dict) or not isinstance(rest, dict) or "traceEvents" in header or "traceEvents" in rest:
        return None
    return {**header, **rest}, found.end(), end


def pieces(raw: bytes, start: int, end: int) -> Iterator[tuple[int, list]]:
    """The events of ``raw[start:end]`` (inside the array) as ``(index of the first, events)``.

    Raises:
        NotPiecewise: a piece is not a JSON list (the cut fell inside a value).
    """
    first = 0
    while start < end:
        cut = raw.find(b"},{", min(start + PIECE_BYTES, end), end)
        stop = end if cut < 0 else cut + 1
        try:
            events = orjson.loads(b"[" + raw[start:stop] + b"]")
        except orjson.JSONDecodeError:
            raise NotPiecewise from None
        yield first, events
        first += len(events)
        start = end if cut < 0 else cut + 2


class Interner:
    """Every event without its volatile keys; kernels (what repeats, and what there are
    millions of) share one dict per distinct rest. Flows and scopes carry ids of their own."""

    def __init__(self) -> None:
        self._seen: dict[bytes, dict] = {}

    def __call__(self, events: list[dict]) -> list[dict]:
        seen, out = self._seen, []
        for raw in events:
            slim = {key: value for key, value in raw.items() if key not in VOLATILE_KEYS}
            out.append(seen.setdefault(orjson.dumps(slim), slim) if slim.get("cat") == "kernel" else slim)
        return out
