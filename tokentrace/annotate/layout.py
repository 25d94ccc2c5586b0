"""Where a merged trace's ``traceEvents`` array ends, and what follows it, found without parsing
the events (docs/merged-format.md, file layout).

A merged file ends ``\\n],\\n<kept members>"displayTimeUnit": "ns",\\n"tokentrace": {...}}\\n``.
Everything after the array is compact JSON without a raw newline, so the array's end is the last
``\\n],\\n`` whose remainder parses as the members of the top-level object. A plain file is read
backwards from its end (the tail only: kB to a few MB of ``file_info``); a gzip file has to be
inflated once from its start.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson

from tokentrace.errors import InputError
from tokentrace.sources.fileio import is_gzip, iter_chunks

ARRAY_END = b"\n],\n"
BLOCK_KEY = b'"tokentrace": '
_READ_BACK = 1 << 20


@dataclasses.dataclass(frozen=True)
class MergedTail:
    """The end of a merged trace, as found.

    Attributes:
        path: the file.
        compressed: the file is gzip (offsets below are in its inflated bytes).
        array_end: offset of the ``\\n],\\n`` that closes ``traceEvents``.
        members: the bytes from after it up to and including ``"tokentrace": `` (the kept
            members and ``displayTimeUnit``, copied as they are).
        block: the parsed ``tokentrace`` block.
        file_info: the kept ``file_info`` object (``{}`` when the file has none).
        empty_array: ``traceEvents`` holds no event (nothing to put a comma after).
    """

    path: Path
    compressed: bool
    array_end: int
    members: bytes
    block: dict
    file_info: dict
    empty_array: bool


def read_tail(path: str | Path) -> MergedTail:
    """Finds the end of ``traceEvents`` and reads the top-level members after it.

    Raises:
        InputError: missing or unreadable, or not a trace written by ``tokentrace merge`` (no
            ``tokentrace`` block after the events).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file; check the path")
    try:
        compressed = is_gzip(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    found = _scan_gzip(path) if compressed else _scan_plain(path)
    if found is None:
        raise not_merged(path)
    offset, before, tail = found
    members, block, info = _split(path, tail)
    return MergedTail(path, compressed, offset, members, block, info, before.rstrip().endswith(b"["))


def not_merged(path: Path) -> InputError:
    """The error for a file that is not a merged trace."""
    return InputError(f"{path}: not a merged trace (no 'tokentrace' block after its events); "
                      "run tokentrace merge on the profile first, or pass its folder")


def _scan_plain(path: Path) -> tuple[int, bytes, bytes] | None:
    """Reads backwards from the end until a candidate array end whose remainder parses."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            start, data = size, b""
            while start > 0:
                start = max(0, start - max(_READ_BACK, len(data)))  # doubles the window each time
                handle.seek(start)
                data = handle.read(size - start)
                hit = _last_valid_end(data, whole=start == 0)
                if hit is not None:
                    return start + hit, data[max(0, hit - 16):hit], data[hit + len(ARRAY_END):]
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return None


def _scan_gzip(path: Path) -> tuple[int, bytes, bytes] | None:
    """Inflates the whole file once, keeping only the bytes after the latest candidate end."""
    offset, held, before, position = -1, b"", b"", 0
    for chunk in iter_chunks(path):
        data = held + chunk
        base = position - len(held)
        hit = data.rfind(ARRAY_END)
        if hit >= 0:
            offset, before, held = base + hit, data[max(0, hit - 16):hit], data[hit:]
        elif offset >= 0:
            held = data  # the tail after the latest candidate grows
        else:
            held = data[-(len(ARRAY_END) - 1):]
        position += len(chunk)
    if offset < 0:
        return None
    rest = held[len(ARRAY_END):]
    if _members(rest) is not None:
        return offset, before, rest
    # A '\n],\n' inside the tail: the real end is earlier; rescan keeping more (rare: a
    # hand-edited file).
    return _scan_gzip_whole(path)


def _scan_gzip_whole(path: Path) -> tuple[int, bytes, bytes] | None:
    data = b"".join(iter_chunks(path))
    hit = _last_valid_end(data, whole=True)
    if hit is None:
        return None
    return hit, data[max(0, hit - 16):hit], data[hit + len(ARRAY_END):]


def _last_valid_end(data: bytes, whole: bool) -> int | None:
    """The position in ``data`` of the last ``\\n],\\n`` followed by valid members; None when
    none is (with ``whole`` False, a hit too close to the window's start is not trusted: the
    16 bytes before it are needed)."""
    hit = data.rfind(ARRAY_END)
    while hit >= 0:
        if hit < 16 and not whole:
            return None
        if _members(data[hit + len(ARRAY_END):]) is not None:
            return hit
        hit = data.rfind(ARRAY_END, 0, hit)
    return None


def _members(tail: bytes) -> dict | None:
    """The top-level members after the array, or None when ``tail`` is not their text."""
    try:
        parsed = orjson.loads(b"{" + tail)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) and isinstance(parsed.get("tokentrace"), dict) else None


def _split(path: Path, tail: bytes) -> tuple[bytes, dict, dict]:
    """Splits the tail into the members copied as they are and the parsed ``tokentrace`` block,
    which must come last (as the merge writes it)."""
    parsed = _members(tail)
    at = tail.rfind(b"\n" + BLOCK_KEY)
    if parsed is None or at < 0 or list(parsed)[-1] != "tokentrace":
        raise not_merged(path)
    members = tail[:at + 1 + len(BLOCK_KEY)]
    body = tail[at + 1 + len(BLOCK_KEY):].rstrip()
    try:
        block = orjson.loads(body[:-1]) if body.endswith(b"}") else None
    except orjson.JSONDecodeError:
        block = None
    if block != parsed["tokentrace"]:
        raise not_merged(path)
    info = parsed.get("file_info")
    return members, block, info if isinstance(info, dict) else {}
