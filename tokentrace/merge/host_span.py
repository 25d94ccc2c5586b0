"""``--combine`` without parsing: a rank's host events copied from its per-rank file.

When a rank's host axis is the combined one (shift 0: the ranks' anchors agree, one host) and
its pids and tids collide with no other rank's, its host events go into the combined file as the
per-rank file holds them (the bytes the per-rank merge copied from the report, checked there).
Only tokenspeed's link starts change: their ids move into the rank's namespace
(:func:`~tokentrace.sources.links.combined_link_id`), as the rewriting path does. A link start
that cannot be read on its own (it is not a flat object) makes :func:`copy_host_span` give up,
and the caller writes the rank by rewriting instead.

Cost: a read, a ``find`` and a write of the span (t39 TP0, 55 MB: ~30 ms) against ~1.2 s for
parsing and re-serialising every event.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import orjson

from tokentrace.sources.links import LINK_CATEGORY, LINK_ID_RE, LINK_NAME, LINK_NEEDLE, combined_link_id

CHUNK_BYTES = 8 << 20


class LinkStartsUnreadable(Exception):
    """A link start of the span is not a flat object that can be read alone."""


def copy_host_span(fd: int, span: tuple[int, int], index: int, write: Callable[[bytes], object]
                   ) -> set[int]:
    """Writes the bytes ``span`` of file ``fd`` with every link start's id namespaced for the
    rank at ``index``; returns the scope ids of those starts.

    Raises:
        LinkStartsUnreadable: a link start cannot be read alone (part of the span may have
            been written: the caller truncates).
    """
    position, end = span
    carry, lead = b"", b""
    scope_ids: set[int] = set()
    while position < end:
        data = carry + os.pread(fd, min(CHUNK_BYTES, end - position), position)
        if not data or len(data) == len(carry):
            raise OSError(f"the per-rank file ended {end - position} bytes early")
        position += len(data) - len(carry)
        # an event with a needle is whole up to the last '}': the rest goes on with the next chunk
        cut = len(data) if position >= end else data.rfind(b"}") + 1
        write(_spliced(data, cut, index, scope_ids, lead, position >= end))
        carry = data[cut:]
        lead = b"}" if cut else lead  # the bytes held on follow this chunk's last '}'
    if carry:
        write(_spliced(carry, len(carry), index, scope_ids, lead, True))
    return scope_ids


def _spliced(data: bytes, cut: int, index: int, scope_ids: set[int], lead: bytes, last: bool) -> bytes:
    """``data[:cut]`` with the link starts' ids namespaced (``lead``: the byte before ``data``,
    none at the span's start; ``last``: ``data`` ends the span)."""
    found = data.find(LINK_NEEDLE, 0, cut)
    if found < 0:
        return data[:cut] if cut < len(data) else data
    pieces, done = [], 0
    while found >= 0:
        replaced = _link_start(data, found, cut, index, lead, last)
        if replaced is not None:
            open_at, close_at, text, scope_id = replaced
            pieces += [data[done:open_at], text]
            done = close_at
            scope_ids.add(scope_id)
        found = data.find(LINK_NEEDLE, found + len(LINK_NEEDLE), cut)
    pieces.append(data[done:cut])
    return b"".join(pieces)


def _link_start(data: bytes, found: int, cut: int, index: int, lead: bytes, last: bool
                ) -> tuple[int, int, bytes, int] | None:
    """The event around the needle at ``found`` with its id namespaced, when it is a link start
    (``(start, end, new bytes, scope id)``); None when it is another flat object (the name in
    some string of it).

    Raises:
        LinkStartsUnreadable: the object around it does not parse alone, or it is a link start
            that may be nested in another object (an event follows another event's ``}`` and a
            comma, and a comma or the span's end follows it: a start inside a list of three or
            more objects in some event's args still passes), or its id cannot be told from its
            bytes.
    """
    open_at, close_at = data.rfind(b"{", 0, found), data.find(b"}", found, cut)
    if open_at < 0 or close_at < 0:
        raise LinkStartsUnreadable
    text = data[open_at:close_at + 1]
    try:
        event = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise LinkStartsUnreadable from None
    if not (isinstance(event, dict) and event.get("name") == LINK_NAME and event.get("cat") == LINK_CATEGORY
            and event.get("ph") == "s"):
        return None
    scope_id = event.get("id")
    if not isinstance(scope_id, int) or isinstance(scope_id, bool):
        return None
    ids = LINK_ID_RE.findall(text)
    before = ((lead if open_at <= 64 else b"") + data[max(0, open_at - 64):open_at]).rstrip()
    first = not before and open_at <= 64  # the span's first event
    after = data[close_at + 1:close_at + 65].lstrip()
    between = first or before.endswith(b",") and before[:-1].rstrip().endswith(b"}")
    if len(ids) != 1 or int(ids[0]) != scope_id or not between \
            or not (after.startswith(b",") or not after and last and close_at + 65 >= len(data)):
        raise LinkStartsUnreadable
    match = LINK_ID_RE.search(text)
    new = text[:match.start(1)] + str(combined_link_id(index, scope_id)).encode() + text[match.end(1):]
    return open_at, close_at + 1, new, scope_id
