"""``--combine`` without parsing: a rank's host events copied from its per-rank file.

When a rank's host axis is the combined one (shift 0: the ranks' anchors agree, one host) and
its pids and tids collide with no other rank's, its host events go into the combined file as the
per-rank file holds them (the bytes the per-rank merge copied from the report, checked there).
Only tokenspeed's link starts change: their ids move into the rank's namespace
(:func:`~tokentrace.sources.links.combined_link_id`), as the rewriting path does. A link start
that cannot be read on its own (it is not a flat object) makes :func:`copy_host_span` give up,
and the caller writes the rank by rewriting instead.

The span is read through a memory map (no copy into this process) for the needle search, and its
bytes between link starts go to the output by ``copy_file_range`` (the kernel copies them from
page cache to page cache), where reading and writing them through this process would copy every
byte out of the kernel and back, allocating and freeing a buffer per piece (system time, the
worst on a machine whose page cache is full). Without ``copy_file_range`` (not Linux, or the
file systems refuse), the bytes are read and written in pieces.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from typing import BinaryIO

import orjson

from tokentrace.sources.links import LINK_CATEGORY, LINK_ID_RE, LINK_NAME, LINK_NEEDLE, combined_link_id

CHUNK_BYTES = 8 << 20


class LinkStartsUnreadable(Exception):
    """A link start of the span is not a flat object that can be read alone."""


def copy_host_span(fd: int, span: tuple[int, int], index: int, write: Callable[[bytes], object],
                   out: BinaryIO | None = None) -> set[int]:
    """Writes the bytes ``span`` of file ``fd`` with every link start's id namespaced for the
    rank at ``index``; returns the scope ids of those starts.

    Args:
        fd: the per-rank file.
        span: its host events, ``(start, end)`` byte offsets.
        index: the rank's position in the combined file.
        write: where the bytes go.
        out: the file ``write`` writes into (a plain output): the bytes that need no change are
            then copied into it by the kernel (``write``'s buffer flushed first, its position
            moved to the end after).

    Raises:
        LinkStartsUnreadable: a link start cannot be read alone (part of the span may have
            been written: the caller truncates).
        OSError: the file is shorter than the span.
    """
    position, end = span
    if os.fstat(fd).st_size < end:
        raise OSError(f"the per-rank file ended {end - os.fstat(fd).st_size} bytes early")
    scope_ids: set[int] = set()
    with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
        copy = _Copier(fd, data, write, out)
        found = data.find(LINK_NEEDLE, position, end)
        while found >= 0:
            replaced = _link_start(data, found, span, index)
            if replaced is not None:
                open_at, close_at, text, scope_id = replaced
                copy.range(position, open_at)
                copy.bytes(text)
                position = close_at
                scope_ids.add(scope_id)
            found = data.find(LINK_NEEDLE, found + len(LINK_NEEDLE), end)
        copy.range(position, end)
        copy.done()
    return scope_ids


def copy_file(fd: int, write: Callable[[bytes], object], out: BinaryIO | None = None) -> None:
    """Writes all of file ``fd`` (as :func:`copy_host_span` writes a span without link starts)."""
    size = os.fstat(fd).st_size
    if size:
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
            copy = _Copier(fd, data, write, out)
            copy.range(0, size)
            copy.done()


class _Copier:
    """Copies ranges of the per-rank file and writes new bytes, in order, into the output."""

    def __init__(self, fd: int, data: mmap.mmap, write: Callable[[bytes], object],
                 out: BinaryIO | None) -> None:
        self.fd, self.data, self.write, self.out = fd, data, write, out
        self.kernel = out is not None and hasattr(os, "copy_file_range")
        self.moved = False  # the output's offset was moved under its buffer

    def bytes(self, text: bytes) -> None:
        self._sync()
        self.write(text)

    def range(self, start: int, end: int) -> None:
        while start < end and self.kernel:
            if not self.moved:
                self.out.flush()
                self.moved = True
            try:
                copied = os.copy_file_range(self.fd, self.out.fileno(), end - start, start)
            except OSError:  # this pair of file systems (or kernel) refuses: copy it here
                self.kernel = False
                break
            if not copied:
                raise OSError(f"the per-rank file ended {end - start} bytes early")
            start += copied
        for piece in range(start, end, CHUNK_BYTES):
            self.bytes(self.data[piece:min(end, piece + CHUNK_BYTES)])

    def done(self) -> None:
        self._sync()

    def _sync(self) -> None:
        if self.moved:  # the buffered writer learns the offset the kernel's copies moved
            self.out.seek(0, os.SEEK_END)
            self.moved = False


def _link_start(data: mmap.mmap, found: int, span: tuple[int, int], index: int
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
    lo, hi = span
    open_at, close_at = data.rfind(b"{", lo, found), data.find(b"}", found, hi)
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
    before = data[max(lo, open_at - 64):open_at].rstrip()
    first = not before and open_at - lo <= 64  # the span's first event
    after = data[close_at + 1:min(hi, close_at + 65)].lstrip()
    between = first or before.endswith(b",") and before[:-1].rstrip().endswith(b"}")
    if len(ids) != 1 or int(ids[0]) != scope_id or not between \
            or not (after.startswith(b",") or not after and close_at + 65 >= hi):
        raise LinkStartsUnreadable
    match = LINK_ID_RE.search(text)
    new = text[:match.start(1)] + str(combined_link_id(index, scope_id)).encode() + text[match.end(1):]
    return open_at, close_at + 1, new, scope_id
