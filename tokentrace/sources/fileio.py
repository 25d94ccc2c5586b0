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
# Inflated size allowed per gzip input (see inflate_limit); the environment variable overrides.
INFLATE_RATIO = 100
INFLATE_FLOOR = 64 << 20
MAX_INFLATE_ENV = "TOKENTRACE_MAX_INFLATE"
FEED_BYTES = 1 << 16
_UNITS = {"K": 10, "M": 20, "G": 30, "T": 40}


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
            return _BoundedGzip(path)  # type: ignore[return-value]
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
    """Inflates gzip members (several may follow each other, as pigz, bgzip and ``cat a.gz b.gz``
    write; zero padding between them is skipped, as gzip does) from ``data`` + the rest of
    ``handle``, at most :func:`inflate_limit` bytes in all.

    Input goes to zlib in pieces of at most :data:`FEED_BYTES`: at each member's end zlib copies
    the rest of its input into ``unused_data``, so a larger piece made a file of many tiny
    members cost a copy of the piece per member. Output is drained with ``max_length`` until zlib
    has none left: a piece fully consumed can still hold output (the rest of a long match).

    Raises:
        InputError: the stream is corrupt, ends inside a member, or inflates past the limit.
    """
    limit = inflate_limit(path)
    read_bytes = max(chunk_bytes // 8, 1 << 16)  # traces inflate ~10x
    inflater, fed, total = zlib.decompressobj(31), False, 0
    buf, pos = data, 0
    try:
        while True:
            if not fed:  # between members: skip zero padding
                while pos < len(buf) and buf[pos] == 0:
                    pos += 1
            if pos >= len(buf):
                buf, pos = handle.read(read_bytes), 0
                if not buf:
                    break
                continue
            piece = buf[pos:pos + FEED_BYTES]
            pos += len(piece)
            fed = True
            out = inflater.decompress(piece, chunk_bytes)
            while True:
                if out:
                    total += len(out)
                    if total > limit:
                        raise inflate_limit_error(path, limit)
                    yield out
                if inflater.eof:  # hand the bytes after this member back: the next member
                    pos -= len(inflater.unused_data)
                    inflater, fed = zlib.decompressobj(31), False
                    break
                if not out:  # all input consumed, nothing pending: needs more input
                    break
                out = inflater.decompress(inflater.unconsumed_tail, chunk_bytes)
    except zlib.error as exc:
        raise truncated_error(path, f"its gzip stream is corrupt ({exc})") from None
    if fed and not inflater.eof:
        raise truncated_error(path, "its gzip stream is cut (EOF inside a member)")


def inflate_limit(path: Path) -> int:
    """The most bytes a gzip input may inflate to: ``$TOKENTRACE_MAX_INFLATE`` when set, else
    :data:`INFLATE_RATIO` times the file's size, at least :data:`INFLATE_FLOOR`. Real traces
    inflate 9-30x (*measured* on every ``.gz`` of ``shared/traces``); a gzip bomb inflates ~1000x
    and took the process to 3 GB before the kernel killed it.

    Raises:
        InputError: ``$TOKENTRACE_MAX_INFLATE`` is no size.
    """
    text = os.environ.get(MAX_INFLATE_ENV, "").strip()
    if text:
        size = parse_size(text)
        if size is None:
            raise InputError(f"${MAX_INFLATE_ENV}={text!r}: not a size; give bytes, or a number "
                             "with K, M, G or T (e.g. 40G)")
        return size
    try:
        return max(INFLATE_FLOOR, INFLATE_RATIO * os.stat(path).st_size)
    except OSError:
        return INFLATE_FLOOR


def parse_size(text: str) -> int | None:
    """Bytes from ``"123"``, ``"512M"``, ``"40G"``, ``"1.5T"`` (powers of 1024); None if no size."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = 1
    if text[-1:] in _UNITS:
        scale, text = 1 << _UNITS[text[-1]], text[:-1]
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value * scale) if value > 0 and value * scale < 1 << 62 else None


def _human(size: int) -> str:
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.3g} {unit}"
    return f"{size} bytes"


def inflate_limit_error(path: Path, limit: int) -> InputError:
    """The error for a gzip input that inflates past ``limit``: what the limit is, and how to
    raise it."""
    try:
        size = _human(os.stat(path).st_size)
    except OSError:
        size = "?"
    source = (f"${MAX_INFLATE_ENV}" if os.environ.get(MAX_INFLATE_ENV, "").strip()
              else f"{INFLATE_RATIO}x its {size}, at least {_human(INFLATE_FLOOR)}")
    return InputError(
        f"{path}: inflates to more than {_human(limit)} (the limit: {source}); real traces "
        f"inflate 10-30x, so this is likely a gzip bomb or not a trace; to read it anyway set "
        f"{MAX_INFLATE_ENV} to a larger size (e.g. {MAX_INFLATE_ENV}=40G)"
    )


class _BoundedGzip:
    """A gzip reader that refuses to inflate more than :func:`inflate_limit` bytes (``read``
    and the context manager: what callers of :func:`open_bytes` use)."""

    def __init__(self, path: Path) -> None:
        self._path, self._limit, self._total = path, inflate_limit(path), 0
        self._file = gzip.open(path, "rb")

    def read(self, size: int = -1) -> bytes:
        left = self._limit - self._total + 1
        data = self._file.read(left if size is None or size < 0 else min(size, left))
        self._total += len(data)
        if self._total > self._limit:
            raise inflate_limit_error(self._path, self._limit)
        return data

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> _BoundedGzip:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
    pending = [carry]  # chunks without a "}" are joined once (+= was quadratic on blanks)
    for chunk in chunks:
        first = chunk.find(b"}") + 1
        if not first:
            pending.append(chunk)
            continue
        last = chunk.rfind(b"}") + 1
        joint = b"".join(pending) + chunk[:first]
        tail = feed(joint, 0, len(joint))
        if tail is not None:
            return tail + chunk[first:] + b"".join(chunks)
        tail = feed(chunk, first, last)
        if tail is not None:
            return tail + chunk[last:] + b"".join(chunks)
        pending = [chunk[last:]]
    carry = b"".join(pending)
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
