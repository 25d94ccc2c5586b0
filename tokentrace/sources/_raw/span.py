"""The host events of a per-rank merged file as ``--combine`` copies them: whether they may be
copied as they are, and where their link starts lie (each start's id is namespaced for the rank
in the copy: ``tokentrace.merge.host_span``).

The span is the bytes the per-rank merge copied from the report (checked there). It may be
copied when every ``"pid"``/``"tid"`` value is one the scan found (it takes them from VizTracer's
metadata events, which name every process and thread VizTracer traced; another writer's report
may use more, which could be another rank's) and no printable character is escaped (a link
start's name or keys written so would be missed by the search for their bytes).
"""

from __future__ import annotations

import mmap
import os
import re
from pathlib import Path

import orjson

from tokentrace.sources import backend
from tokentrace.sources._raw.links import LINK_ID_RE, LINK_NEEDLE, LINK_NEEDLE_RARE, LinkPlace, LinkStarts
from tokentrace.sources._raw.scan import positions
from tokentrace.sources.links import LINK_CATEGORY, LINK_NAME

_OVERLAP = 256  # longer than any match below, so none is missed at a chunk's edge
# A printable ASCII character written as a \u escape: Python's json never writes one (VizTracer's
# reports hold none), and the copy looks for link starts by their name's plain bytes.
_ESCAPE = b"\\u00"
_ESCAPED_PRINTABLE = re.compile(rb"\\u00[2-7][0-9a-fA-F]")


def span_link_starts(path: Path, span: tuple[int, int], known_ids: tuple[set[int], set[int]] | None) -> LinkStarts:
    """The link starts of ``span`` of the plain file at ``path``
    (:func:`~tokentrace.sources._raw.find_link_starts`); with ``known_ids`` (pids, tids), only
    when the span is copyable. The span is read once: the check and the search for the link
    starts' name share its chunks; only the objects around the names found are read again."""
    position, end = span
    with open(path, "rb") as source:
        if os.fstat(source.fileno()).st_size < end:  # the copy's own read says why
            return LinkStarts(copyable=False) if known_ids is not None else LinkStarts(unparsed=1)
        if end <= position:
            return LinkStarts(copyable=None if known_ids is None else True)
        copyable, names = _read_span(source.fileno(), span, known_ids, backend.current().span_scan_bytes)
        if copyable is False:
            return LinkStarts(copyable=False)
        places = []
        if names:
            with mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ) as data:
                for found in names:
                    try:
                        place = _link_start(data, found, span)
                    except _Unreadable:
                        return LinkStarts(unparsed=1, copyable=copyable)
                    if place is not None:
                        places.append(place)
    return LinkStarts(frozenset(p.scope_id for p in places), 0, tuple(places), copyable)


class _Unreadable(Exception):
    """A link start of the span is not a flat object that can be read alone."""


def _link_start(data: mmap.mmap, found: int, span: tuple[int, int]) -> LinkPlace | None:
    """The link start around the needle at ``found``; None when it is another flat object (the
    name in some string of it).

    Raises:
        _Unreadable: the object around it does not parse alone, or it is a link start that may
            be nested in another object (an event follows another event's ``}`` and a comma, and
            a comma or the span's end follows it: a start inside a list of three or more objects
            in some event's args still passes), or its id cannot be told from its bytes.
    """
    lo, hi = span
    open_at, close_at = data.rfind(b"{", lo, found), data.find(b"}", found, hi)
    if open_at < 0 or close_at < 0:
        raise _Unreadable
    text = data[open_at:close_at + 1]
    try:
        event = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise _Unreadable from None
    if not (isinstance(event, dict) and event.get("name") == LINK_NAME and event.get("cat") == LINK_CATEGORY
            and event.get("ph") == "s"):
        return None
    scope_id = event.get("id")
    if not isinstance(scope_id, int) or isinstance(scope_id, bool):
        return None
    ids = LINK_ID_RE.findall(text)
    before = data[max(lo, open_at - 64):open_at].rstrip()
    first = not before and open_at - lo <= 64  # the span's first event
    after = data[close_at + 1:min(hi, close_at + 65)].lstrip()
    between = first or before.endswith(b",") and before[:-1].rstrip().endswith(b"}")
    if len(ids) != 1 or int(ids[0]) != scope_id or not between \
            or not (after.startswith(b",") or not after and close_at + 65 >= hi):
        raise _Unreadable
    match = LINK_ID_RE.search(text)
    return LinkPlace(open_at, close_at + 1, open_at + match.start(1), open_at + match.end(1), scope_id)


def _read_span(fd: int, span: tuple[int, int], known_ids: tuple[set[int], set[int]] | None,
               scan_bytes: int) -> tuple[bool | None, list[int]]:
    """Reads ``span`` of file ``fd`` ``scan_bytes`` at a time: whether it is copyable (None
    without ``known_ids``; False stops the read) and where the link starts' quoted name lies.

    Cost per chunk: one regex search for both keys, from their common literal ``id"`` (sre
    skips to a literal prefix with a fast search; each key is then told by a look-behind), so
    the bytes are read once, not once per key; the escapes are found through their backslash
    and the name through its ``>`` (``bytes.find`` of one byte is memchr; reports hold few of
    either), not by a regex, which sre tries at every byte. An alternation of the keys' whole
    patterns has no literal prefix, so sre would try all of it at every byte.

    Where the report names the same ids for its processes and threads (a process of one traced
    thread), a value outside them is first looked for after any key ending ``id"``: no
    look-behind per key, the value told first (a third less per chunk); only a chunk where that
    finds one (another key, such as a link start's ``"id"``, or an unknown value) is searched
    again key by key."""
    unknown = any_unknown = None
    if known_ids is not None:
        pids, tids = known_ids
        unknown = re.compile(rb'id"(?:(?<="pid")' + _unknown(pids) + rb'|(?<="tid")' + _unknown(tids) + rb")")
        if pids == tids:
            any_unknown = re.compile(rb'id"' + _unknown(pids))
    position, end = span
    names: list[int] = []
    while position < end:
        start = max(span[0], position - _OVERLAP)
        data = os.pread(fd, min(scan_bytes, end - position) + position - start, start)
        if not data:
            return (False if unknown is not None else None), names
        position = start + len(data)
        # a match in the last _OVERLAP bytes may be a value cut short: the next chunk,
        # which starts before it, decides
        limit = len(data) if position >= end else len(data) - _OVERLAP
        if unknown is not None and (any_unknown is None or any_unknown.search(data) is not None):
            found = unknown.search(data)
            if found is not None and found.start() < limit:
                return False, names
        if unknown is not None and _escaped_printable(data, limit):
            return False, names
        # each name once: one starting in the last _OVERLAP bytes is the next chunk's, which
        # starts there
        names.extend(start + at for at in positions(data, LINK_NEEDLE, LINK_NEEDLE_RARE, 0, len(data)) if at < limit)
    return (True if unknown is not None else None), names


def _escaped_printable(data: bytes, limit: int) -> bool:
    """Whether a printable character's ``\\u00XX`` escape starts before ``limit``."""
    return any(_ESCAPED_PRINTABLE.match(data, at) for at in positions(data, _ESCAPE, 0, 0, limit))


def _unknown(known: set[int]) -> bytes:
    """A regex for what follows a ``"pid"``/``"tid"`` key whose value is not one of ``known``."""
    values = b"|".join(str(v).encode() for v in sorted(known))
    return rb"\s*+:\s*+" + (rb"(?!(?:" + values + rb")[\s,}])" if values else b"")
