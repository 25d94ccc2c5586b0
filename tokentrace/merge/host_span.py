"""``--combine`` without parsing: a rank's host events copied from its per-rank file.

When a rank's host axis is the combined one (shift 0: the ranks' anchors agree, one host) and
its pids and tids collide with no other rank's, its host events go into the combined file as the
per-rank file holds them (the bytes the per-rank merge copied from the report, checked there).
Only tokenspeed's link starts change: their ids move into the rank's namespace
(:func:`~tokentrace.sources.links.combined_link_id`), as the rewriting path does. The worker that
merged the rank found them (:func:`~tokentrace.sources._raw.find_link_starts`); a link start
that cannot be read on its own (it is not a flat object) makes :func:`copy_host_span` give up,
and the caller writes the rank by rewriting instead.

The span is read through a memory map (no copy into this process), and its bytes between link
starts go to the output by ``copy_file_range`` (the kernel copies them from
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

from tokentrace.sources._raw import LinkStarts
from tokentrace.sources.backend import current
from tokentrace.sources.links import combined_link_id


class LinkStartsUnreadable(Exception):
    """A link start of the span is not a flat object that can be read alone."""


def copy_host_span(fd: int, span: tuple[int, int], starts: LinkStarts, index: int,
                   write: Callable[[bytes], object], out: BinaryIO | None = None,
                   chunk_bytes: int | None = None) -> set[int]:
    """Writes the bytes ``span`` of file ``fd`` with every link start's id namespaced for the
    rank at ``index``; returns the scope ids of those starts.

    Args:
        fd: the per-rank file.
        span: its host events, ``(start, end)`` byte offsets.
        starts: the span's link starts, with where each lies
            (:func:`~tokentrace.sources._raw.find_link_starts` of the span).
        index: the rank's position in the combined file.
        write: where the bytes go.
        out: the file ``write`` writes into (a plain output): the bytes that need no change are
            then copied into it by the kernel (``write``'s buffer flushed first, its position
            moved to the end after).
        chunk_bytes: bytes copied at a time where the kernel does not copy them (None: the
            ``span_copy_bytes`` of the reading configuration, :mod:`tokentrace.sources.backend`).

    Raises:
        LinkStartsUnreadable: a link start cannot be read alone (nothing written).
        OSError: the file is shorter than the span.
    """
    position, end = span
    if os.fstat(fd).st_size < end:
        raise OSError(f"the per-rank file ended {end - os.fstat(fd).st_size} bytes early")
    if starts.unparsed:
        raise LinkStartsUnreadable
    scope_ids: set[int] = set()
    with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
        copy = _Copier(fd, data, write, out, chunk_bytes)
        for place in starts.places:
            copy.range(position, place.start)
            copy.bytes(data[place.start:place.id_start] + str(combined_link_id(index, place.scope_id)).encode()
                       + data[place.id_end:place.end])
            position = place.end
            scope_ids.add(place.scope_id)
        copy.range(position, end)
        copy.done()
    return scope_ids


def copy_file(fd: int, write: Callable[[bytes], object], out: BinaryIO | None = None,
              chunk_bytes: int | None = None) -> None:
    """Writes all of file ``fd`` (as :func:`copy_host_span` writes a span without link starts)."""
    size = os.fstat(fd).st_size
    if size:
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
            copy = _Copier(fd, data, write, out, chunk_bytes)
            copy.range(0, size)
            copy.done()


class _Copier:
    """Copies ranges of the per-rank file and writes new bytes, in order, into the output."""

    def __init__(self, fd: int, data: mmap.mmap, write: Callable[[bytes], object],
                 out: BinaryIO | None, chunk_bytes: int | None) -> None:
        self.fd, self.data, self.write, self.out = fd, data, write, out
        self.chunk_bytes = chunk_bytes if chunk_bytes is not None else current().span_copy_bytes
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
        for piece in range(start, end, self.chunk_bytes):
            self.bytes(self.data[piece:min(end, piece + self.chunk_bytes)])

    def done(self) -> None:
        self._sync()

    def _sync(self) -> None:
        if self.moved:  # the buffered writer learns the offset the kernel's copies moved
            self.out.seek(0, os.SEEK_END)
            self.moved = False
