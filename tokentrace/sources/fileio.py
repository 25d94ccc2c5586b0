"""Opening trace files: plain or gzip (told by the magic bytes, not the name), read in chunks.

Read errors are turned into :class:`~tokentrace.errors.InputError` messages that name the file
and say what to do; a file modified in the last seconds is reported as still being written.
"""

from __future__ import annotations

import gzip
import os
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from tokentrace.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
CHUNK_BYTES = 4 << 20
# A file modified this recently and unreadable is most likely still being written.
FRESH_SECONDS = 2.0


def is_gzip(path: Path) -> bool:
    """True when the file starts with the gzip magic bytes."""
    with open(path, "rb") as handle:
        return handle.read(2) == GZIP_MAGIC


def open_bytes(path: Path) -> BinaryIO:
    """Opens ``path`` for binary reading, decompressing gzip transparently.

    Raises:
        InputError: the file is missing or unreadable.
    """
    try:
        if is_gzip(path):
            return gzip.open(path, "rb")  # type: ignore[return-value]
        return open(path, "rb")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file; check the path") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def iter_chunks(path: Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """Yields the (decompressed) bytes of ``path`` in chunks of about ``chunk_bytes``.

    gzip is inflated with :func:`zlib.decompressobj` on large reads: about twice as fast as
    ``gzip.open().read(n)``, and zlib releases the GIL (a writer thread runs meanwhile).

    Raises:
        InputError: missing, unreadable, or a gzip stream that ends early or is corrupt.
    """
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file; check the path") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    with handle:
        first = handle.read(chunk_bytes)
        if first[:2] != GZIP_MAGIC:
            while first:
                yield first
                first = handle.read(chunk_bytes)
            return
        yield from _inflate(path, first, handle, chunk_bytes)


def _inflate(path: Path, data: bytes, handle: BinaryIO, chunk_bytes: int) -> Iterator[bytes]:
    """Inflates gzip members (several may follow each other) from ``data`` + the rest of ``handle``.

    Raises:
        InputError: the stream is corrupt or ends inside a member.
    """
    read_bytes = max(chunk_bytes // 8, 1 << 16)  # traces inflate ~10x
    inflater, fed = zlib.decompressobj(31), False
    try:
        while data:
            out = inflater.decompress(data, chunk_bytes)
            fed, data = True, inflater.unconsumed_tail
            if inflater.eof:  # the next gzip member, if any
                data = inflater.unused_data + data
                inflater, fed = zlib.decompressobj(31), False
            elif not data:
                data = handle.read(read_bytes)
            if out:
                yield out
        rest = inflater.flush()
    except zlib.error as exc:
        raise truncated_error(path, f"its gzip stream is corrupt ({exc})") from None
    if rest:
        yield rest
    if fed and not inflater.eof:
        raise truncated_error(path, "its gzip stream is cut (EOF inside a member)")


def feed_event_ranges(chunks: Iterator[bytes], feed: Callable[[bytes, int, int], bytes | None],
                      carry: bytes = b"") -> bytes | None:
    """Hands a stream of JSON event bytes (``carry``, then ``chunks``) to ``feed(data, start, end)``
    as ranges that each end just after a ``}`` (the stream's rest after its last ``}`` comes last),
    so no number and no flat object is cut. A chunk is handed on in place, never sliced: only the
    joint of the previous chunk's rest and the chunk's first ``}`` is copied (joining each 4 MiB
    chunk to that rest instead cost a copy of the whole stream).

    ``feed`` returns None to go on, or the bytes after the point in its range where it stopped;
    those are returned with everything after the range. None: ``feed`` never stopped.
    """
    for chunk in chunks:
        first = chunk.find(b"}") + 1
        if not first:
            carry += chunk
            continue
        last = chunk.rfind(b"}") + 1
        joint = carry + chunk[:first]
        tail = feed(joint, 0, len(joint))
        if tail is not None:
            return tail + chunk[first:] + b"".join(chunks)
        tail = feed(chunk, first, last)
        if tail is not None:
            return tail + chunk[last:] + b"".join(chunks)
        carry = chunk[last:]
    return feed(carry, 0, len(carry))


def read_all(path: Path) -> bytes:
    """Returns the whole (decompressed) content of ``path``."""
    return b"".join(iter_chunks(path))


def read_head(path: Path, size: int = 1 << 16) -> bytes:
    """Returns up to ``size`` leading (decompressed) bytes; a cut gzip stream gives what it has."""
    with open_bytes(path) as handle:
        try:
            return handle.read(size)
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError):
            return b""


def read_tail(path: Path, size: int = 1 << 16) -> bytes:
    """Returns up to ``size`` trailing bytes of a plain file; ``b""`` for a gzip file (its end
    is known only once inflated) or one that cannot be read."""
    try:
        with open(path, "rb") as handle:
            if handle.read(2) == GZIP_MAGIC:
                return b""
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - size))
            return handle.read(size)
    except OSError:
        return b""


def is_fresh(path: Path, now: float | None = None) -> bool:
    """True when ``path`` was modified within the last :data:`FRESH_SECONDS`."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return False
    return ((time.time() if now is None else now) - mtime) < FRESH_SECONDS


def truncated_error(path: Path, what: str) -> InputError:
    """The error for a file that ends early: 'still being written' when it is fresh."""
    if is_fresh(path):
        return InputError(
            f"{path}: {what}; it was modified less than {FRESH_SECONDS:g} s ago and is probably "
            "still being written; wait until the profiler has finished and run again"
        )
    return InputError(f"{path}: {what}; the file is truncated, re-copy or re-record it")
