"""Rewriting a merged trace with events inserted at the end of ``traceEvents``: its bytes copied
up to the array's end (less an earlier annotation's), the new events, then the members after the
array as they were and the updated ``tokentrace`` block. Streamed (the events are never parsed),
written atomically (:mod:`tokentrace.runtime.files`), no more readable than the input.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable
from pathlib import Path

import orjson

from tokentrace.annotate.layout import ARRAY_END, MergedTail
from tokentrace.errors import InputError
from tokentrace.runtime.files import atomic_output, private_like
from tokentrace.sources.fileio import open_bytes

CHUNK_BYTES = 4 << 20


def rewrite(tail: MergedTail, output: Path, compress: bool, events: list[bytes],
            block: Callable[[int], dict], strip: int = 0, strip_head: bytes = b"") -> int:
    """Writes ``tail.path`` with ``events`` at the end of its events into ``output``.

    Args:
        tail: where the input's array ends (:func:`~tokentrace.annotate.layout.read_tail`).
        output: the file written (may be the input: it is replaced only when complete).
        compress: gzip the output.
        events: the event texts to insert, in order.
        block: gives the ``tokentrace`` block written after the kept members, from the length
            of the inserted text.
        strip: the length of an earlier insertion, just before the array's end, to cut.
        strip_head: what that insertion starts with (after its comma), checked before cutting.

    Returns:
        The length of the inserted text (what a later call strips).

    Raises:
        InputError: the input cannot be read, or does not hold ``strip_head`` where expected.
    """
    # private_like: an annotated copy (the user cache's annotated/) keeps the input's privacy
    with private_like([tail.path]), atomic_output(output, compress) as write:
        found = copy_prefix(tail.path, tail.array_end - strip, write, keep_after=strip)
        if strip and not found.removeprefix(b",\n").startswith(strip_head):
            raise InputError(f"{tail.path}: the annotations its 'tokentrace' block records are not "
                             "where it says; merge the profile again")
        empty = not found.startswith(b",\n") if strip else tail.empty_array
        inserted = (b"" if empty or not events else b",\n") + b",\n".join(events)
        write(inserted)
        write(ARRAY_END + tail.members + orjson.dumps(block(len(inserted)), option=orjson.OPT_SORT_KEYS) + b"}\n")
    return len(inserted)


def copy_prefix(path: Path, length: int, write: Callable[[bytes], object], keep_after: int = 0) -> bytes:
    """Writes the first ``length`` (inflated) bytes of ``path``; returns the ``keep_after`` bytes
    that follow them.

    Raises:
        InputError: unreadable, or shorter than ``length + keep_after``.
        OSError: ``write`` failed (no space ...): :func:`~tokentrace.runtime.files.atomic_path` names
            the output it was writing (caught here with the reads, it blamed the input).
    """
    left, kept = length, b""
    with open_bytes(path) as handle:
        while left > 0:
            chunk = _read(path, handle, min(CHUNK_BYTES, left))
            if not chunk:
                break
            write(chunk)  # a failed write goes up as it is: the output's error, not the input's
            left -= len(chunk)
        if keep_after:
            kept = _read(path, handle, keep_after)
    if left > 0 or len(kept) != keep_after:
        raise InputError(f"{path}: changed while it was being annotated; run again")
    return kept


def _read(path: Path, handle, size: int) -> bytes:
    """``handle.read(size)``; an error of the read names the input."""
    try:
        return handle.read(size)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise InputError(f"{path}: cannot be read ({exc})") from None
