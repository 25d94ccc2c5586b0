"""The exact check of a VizTracer report's events, behind the copy's cheap scan.

The merge copies host events byte for byte, so what Perfetto would refuse in them (NaN, a word
or text where a number belongs, ``"ts": 1 2``, a time beyond int64 ns) must be caught here,
naming the input, not later naming the merged file. The scan
(:class:`~tokentrace.sources._raw.scan.Scan`) flags suspects at almost no cost; a suspect its own
event's parse does not clear comes here: the whole report is parsed (orjson: every event becomes
Python objects, which the copy never does, so only on this path) and the first bad event is
named with its index and what to do, or the report is found sound and the copy goes on.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from tokentrace.errors import InputError
from tokentrace.sources.event_fields import first_bad_event, load_lenient
from tokentrace.sources.fileio import read_all, truncated_error

_FIX = ("Perfetto cannot load it; re-record the report, or repair or delete that event, then "
        "merge again")
_INDEX_TRIES = 3  # prefixes parsed to count the events before a syntax error
_ONE_LINE = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def check_report(path: Path) -> None:
    """Checks every event of the VizTracer report at ``path`` (plain or gzip); returns when
    all are sound.

    Raises:
        InputError: naming the file, the event index, what is wrong and what to do.
    """
    raw = read_all(path)
    try:
        doc = load_lenient(raw)
    except orjson.JSONDecodeError as exc:
        raise syntax_error(path, raw, exc) from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise InputError(f"{path}: no 'traceEvents' list; this is not a VizTracer report")
    found = first_bad_event(events)
    if found is not None:
        index, what = found
        raise InputError(f"{path}: traceEvents[{index}] {what}; {_FIX}")


def syntax_error(path: Path, raw: bytes, exc: orjson.JSONDecodeError) -> InputError:
    """The error for a report that is not JSON: the event index where it breaks, the reason,
    the bytes there."""
    position = _byte_position(raw, exc.pos)
    if position >= len(raw.rstrip()) - 1:
        return truncated_error(path, "the JSON ends early")
    reason = str(exc.msg)
    near = raw[max(0, position - 30):position + 30].decode("utf-8", "replace")
    near = near.translate(_ONE_LINE)  # a break between events must not split the message
    index = _event_index(raw, position)
    where = f"traceEvents[{index}]" if index is not None else f"byte {position}"
    return InputError(f"{path}: {where} is not valid JSON ({reason} at byte {position}: "
                      f"...{near}...); {_FIX}")


def _byte_position(raw: bytes, char_position: int) -> int:
    if raw.isascii():
        return char_position
    return len(raw.decode("utf-8", "replace")[:char_position].encode("utf-8"))


def _event_index(raw: bytes, position: int) -> int | None:
    """How many events come before the one holding ``position`` (None when the prefix before
    it does not parse, e.g. the break is not inside the events)."""
    start = raw.find(b"[") + 1
    if start <= 0 or start > position:
        return None
    cut = position
    separator = b"}, {" if raw.find(b"}, {", start, position) >= 0 else b"},{"  # json / orjson
    for _ in range(_INDEX_TRIES):
        cut = raw.rfind(separator, start, cut)
        if cut < 0:  # no event ends before it: the first one
            return 0
        try:
            return len(orjson.loads(b"[" + raw[start:cut + 1] + b"]"))
        except orjson.JSONDecodeError:
            continue
    return None
