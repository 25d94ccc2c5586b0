"""A large Proton trace read piece by piece, so that no dict per event outlives its piece.

``orjson.loads`` of a whole trace holds one dict (with its args dict, call-stack list and
strings) per event: ~1 KB each, 2 GB for 2 M tiny kernels. Above ``piecewise_bytes``
(of the reading configuration, :mod:`tokentrace.sources.backend`; 32 MiB), the
``traceEvents`` array is cut at event boundaries (``},{``) into pieces of ~4 MiB, each parsed
alone, and every event's keys but its times and ids are interned (:class:`Interner`: one shared
dict for all the launches of one kernel from one call stack), so what is kept per event is its
:class:`~tokentrace.sources.proton.ProtonEvent`. When a cut does not give JSON (a string or a
nested list holding ``},{``), or the file is not of that shape, the reader parses it whole: the
pieces are a shortcut, never a second grammar.

:func:`stream_document` does the same from the file's chunks without holding the whole text
(the torch-profiler reader): cuts may have whitespace around the comma (torch writes
``},\n  {``), and the members after the array are known once the last piece is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson

# Keys that differ from launch to launch, read into columns before the rest is interned.
VOLATILE_KEYS = frozenset({"ts", "dur", "pid", "tid"})
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_CUT = re.compile(rb"\}\s*,\s*\{")  # between two events, whitespace allowed
_CARRY = 256  # a cut may straddle two chunks: search again from this far before the new one


# Between two concatenated documents (triton 3.6 writes one per CUDA stream): a closing brace,
# JSON whitespace, an opening brace. Valid JSON has no such joint outside strings (objects in an
# array need commas), so a match inside a string is told by its pieces failing to parse.
_DOCUMENT_JOINT = re.compile(rb"\}[ \t\r\n]*\{")


def document_ends(raw) -> list[int]:
    """Where each candidate document of ``raw`` ends (the last is ``len(raw)``).

    One regex pass over the text, so each document is then parsed once; a candidate that is not
    a document (the joint fell inside a string) is joined to the next by the reader when it
    fails to parse.
    """
    return [m.start() + 1 for m in _DOCUMENT_JOINT.finditer(raw)] + [len(raw)]


class NotPiecewise(Exception):
    """A piece did not parse: read the file whole instead."""


def split_document(raw: bytes) -> tuple[dict, int, int] | None:
    """``(every top-level member but traceEvents, start, end)`` where ``raw[start:end]`` is the
    inside of the ``traceEvents`` brackets; None when ``raw`` is not one object from which the
    array can be cut out this way."""
    found = _EVENTS_KEY.search(raw)
    if found is None or not raw.lstrip().startswith(b"{"):
        return None
    end, rest = array_end(raw, found.end())
    header = _members_before(raw[:found.start()])
    if header is None or rest is None:
        return None
    return {**header, **rest}, found.end(), end


_END_TRIES = 16  # "]" from the end tried as the array's (members after it may hold lists)


def array_end(text, start: int = 0) -> tuple[int, dict | None]:
    """The position of the ``]`` that closes the events (at or after ``start``) and the members
    after it: of the last ``]``s, the first whose rest is the end of the object (members after
    the array, a ``deviceProperties`` list or a ``traceName`` such as ``run[0]``, hold ``]`` too,
    and a rest from one of theirs parses as well); ``(-1, None)`` when none is."""
    found, end = (-1, None), len(text)
    for _ in range(_END_TRIES):
        end = text.rfind(b"]", start, end)
        if end < 0:
            break
        rest = _members_after(bytes(text[end + 1:]))
        if rest is not None:
            found = end, rest
    return found


def _members_before(before: bytes) -> dict | None:
    """The members before ``"traceEvents"`` (``{"a": 1,``) as an object; None if not one."""
    before = before.rstrip()
    return _members((before[:-1] if before.endswith(b",") else before) + b"}")


def _members_after(after: bytes) -> dict | None:
    """The members after the array's ``]`` (``, "b": 2}``) as an object; None if not one."""
    after = after.strip()
    tail = b"{" + after[1:] if after.startswith(b",") else after
    return _members(tail) if tail != b"}" else {}


def _members(text: bytes) -> dict | None:
    try:
        found = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return found if isinstance(found, dict) and "traceEvents" not in found else None


def pieces(raw: bytes, start: int, end: int, piece_bytes: int) -> Iterator[tuple[int, list]]:
    """The events of ``raw[start:end]`` (inside the array) as ``(index of the first, events)``,
    in pieces of about ``piece_bytes``.

    Raises:
        NotPiecewise: a piece is not a JSON list (the cut fell inside a value).
    """
    first = 0
    while start < end:
        cut = raw.find(b"},{", min(start + piece_bytes, end), end)
        stop = end if cut < 0 else cut + 1
        events = _events(raw[start:stop])
        yield first, events
        first += len(events)
        start = end if cut < 0 else cut + 2


def _events(text) -> list:
    """The events of one piece (the inside of the array between two cuts).

    Raises:
        NotPiecewise: not a JSON list.
    """
    try:
        events = orjson.loads(b"[" + text + b"]")
    except orjson.JSONDecodeError:
        raise NotPiecewise from None
    return events


class StreamedDocument:
    """A large trace read from its chunks: the members before ``traceEvents`` (:attr:`header`),
    its events a piece at a time (:meth:`pieces`), then the members after the array
    (:attr:`rest`, set once the pieces are read). It holds the text read to tell it large (the
    threshold of :func:`stream_document`), then about a piece and a chunk."""

    def __init__(self, header: dict, buffer: bytearray, chunks: Iterator[bytes],
                 piece_bytes: int) -> None:
        self.header = header
        self._piece_bytes = piece_bytes
        self.rest: dict[str, Any] | None = None
        self._buffer = buffer
        self._chunks = chunks

    def pieces(self) -> Iterator[tuple[int, list]]:
        """``(index of the first, events)`` of each piece, as :func:`pieces`.

        Raises:
            NotPiecewise: a piece is not a JSON list, or what follows the array is not the end
                of the object: read the file whole.
        """
        buffer, first, searched = self._buffer, 0, 0
        while True:
            cut = None
            if len(buffer) > self._piece_bytes:
                found = _CUT.search(buffer, max(self._piece_bytes, searched - _CARRY))
                cut, searched = (found.span() if found else None), len(buffer)
            if cut is None:
                chunk = next(self._chunks, None)
                if chunk is None:
                    break
                buffer += chunk
                continue
            events = _events(buffer[:cut[0] + 1])
            yield first, events
            first += len(events)
            del buffer[:cut[1] - 1]
            searched = 0
        end, rest = array_end(buffer)
        if rest is None:
            raise NotPiecewise
        del buffer[end:]
        self.rest = rest
        yield first, _events(buffer)


def stream_document(chunks: Iterator[bytes], threshold: int,
                    piece_bytes: int) -> bytes | StreamedDocument:
    """The content of ``chunks`` when it is at most ``threshold`` bytes, or not one object whose
    ``traceEvents`` array can be cut out; else the document to be read in pieces of about
    ``piece_bytes``."""
    head, size = [], 0
    for chunk in chunks:
        head.append(chunk)
        size += len(chunk)
        if size > threshold:
            break
    else:
        return b"".join(head)
    text = b"".join(head)
    del head
    found = _EVENTS_KEY.search(text)
    header = _members_before(text[:found.start()]) if found and text.lstrip().startswith(b"{") else None
    if header is None:
        return b"".join([text, *chunks])
    return StreamedDocument(header, bytearray(text[found.end():]), chunks, piece_bytes)


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
