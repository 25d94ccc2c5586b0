"""Field types of trace events, checked on parsed events: GPU-trace events (Proton, torch
profiler) column-wise on read, VizTracer events where the merge parses them (its fallback and
``--combine``'s rewrite), and the lenient parse they share.

A ``ts`` that is null, text or beyond what Perfetto holds, a kernel without ``ts`` or a ``tid``
that is no number would otherwise crash the reader or land silently at t = 0. Each check runs
over a column at C speed (``map(type, ...)``) and only looks for the culprit, by index in the
file's ``traceEvents``, when the column is bad.
"""

from __future__ import annotations

import json
import operator
from pathlib import Path

import orjson

from tokentrace.errors import InputError

# Perfetto keeps ns in int64: a ts beyond this many µs cannot be loaded.
MAX_TS_US = 9.2e15
# The top-level keys of a VizTracer report the merged file keeps (VizTracer writes them in this order).
KEPT_KEYS = ("viztracer_metadata", "file_info")

_NUMBER_TYPES = frozenset({int, float})
_PH = operator.itemgetter("ph")
_FIX = "re-record the trace, or repair or delete that event"


def check_times(path: Path, events: list, kept: list[dict], key: str, values: list,
                required: bool, first: int = 0) -> None:
    """Checks that every value of ``key`` is a number Perfetto can hold (``dur`` also >= 0).

    Args:
        path: the trace, for the message.
        events: the file's ``traceEvents`` (to name the culprit's index).
        kept: the events checked, in file order; ``values`` holds their ``key``.
        key: ``ts`` or ``dur``.
        values: ``event.get(key)`` of each kept event (None where absent).
        required: a missing value is an error (``ts``); else it counts as 0 (``dur``).
        first: the index of ``events[0]`` in the file (a trace read in pieces).

    Raises:
        InputError: naming the file, the event index, its name and what to do.
    """
    types = set(map(type, values))
    if types <= _NUMBER_TYPES and (not values or _in_range(key, min(values), max(values))):
        return
    for event, value in zip(kept, values):
        if value is None and not required:
            continue
        if value is None and key not in event:
            problem = f"has no {key}; every event but metadata needs its start time"
        elif type(value) not in _NUMBER_TYPES:
            problem = f"has {key} {value!r}, not a number of µs"
        elif not _in_range(key, value, value):
            problem = (f"has {key} {value!r} µs, beyond what Perfetto holds (int64 ns)"
                       if key == "ts" or value > 0 else f"has a negative {key} ({value!r} µs)")
        else:
            continue
        raise InputError(f"{path}: {_name(events, event, first)} {problem}; {_FIX}")


def _in_range(key: str, low: float, high: float) -> bool:
    return (low >= 0 if key == "dur" else low >= -MAX_TS_US) and high <= MAX_TS_US


# Trace-event phases Perfetto's JSON importer reads (anything else fails its tokenizer).
PHASES = frozenset("BEXiIsTtfMCbneNODPRc")


def check_phases(path: Path, events: list, kept: list[dict], first: int = 0) -> None:
    """Checks that every kept event's ``ph`` is a phase Perfetto reads.

    Raises:
        InputError: naming the event.
    """
    try:
        if set(map(_PH, kept)) <= PHASES:
            return
    except TypeError:  # a ph that is a list or an object
        pass
    event = next(e for e in kept if _phase(e) not in PHASES)
    raise InputError(f"{path}: {_name(events, event, first)} has ph {event.get('ph')!r}, not a trace-event "
                     f"phase ({', '.join(sorted(PHASES))}); {_FIX}")


def _phase(event: dict):
    phase = event.get("ph")
    return phase if type(phase) is str else None


def check_lanes(path: Path, events: list, kept: list[dict], values: list, first: int = 0) -> list[int]:
    """The ``tid`` of each kept event as an int (Proton lanes; absent: 0; digit strings and
    whole floats taken as their number).

    Raises:
        InputError: a ``tid`` that is no whole number, naming the event.
    """
    if set(map(type, values)) <= {int}:
        return values
    lanes = []
    for event, value in zip(kept, values):
        if type(value) is int:
            lanes.append(value)
            continue
        try:
            lane = int(value)
            if isinstance(value, bool) or (isinstance(value, float) and lane != value):
                raise ValueError
        except (TypeError, ValueError, OverflowError):
            raise InputError(f"{path}: {_name(events, event, first)} has tid {value!r}, not a whole "
                             f"number (Proton writes its lane number there); {_FIX}") from None
        lanes.append(lane)
    return lanes


def _name(events: list, event: dict, first: int = 0) -> str:
    """``traceEvents[12] (X kernel 'gemm')``: the culprit as a user finds it in the file."""
    index = next((first + i for i, e in enumerate(events) if e is event), None)
    where = f"traceEvents[{index}]" if index is not None else "an event"
    what = " ".join(str(event[k]) for k in ("ph", "cat") if isinstance(event.get(k), str))
    name = event.get("name")
    name = name if not isinstance(name, str) or len(name) <= 60 else name[:57] + "..."
    return f"{where} ({what}{' ' if what and name else ''}{name!r})" if name or what else where


def is_time(value: object) -> bool:
    """A host ``ts``/``dur`` Perfetto can load: an int or float (not bool), finite, from 0 to
    int64 ns (Perfetto drops events before 0)."""
    return (type(value) is int or type(value) is float) and 0 <= value <= MAX_TS_US


def first_bad_event(events: list) -> tuple[int, str] | None:
    """The index of the first VizTracer event that is no object or has a ``ts``/``dur``
    Perfetto cannot hold, with what is wrong; None when all are sound."""
    for index, event in enumerate(events):
        if type(event) is not dict:
            return index, f"is not an event object: {str(event)[:60]}"
        for key in ("ts", "dur"):
            if key in event and not is_time(event[key]):
                return index, (f"has {key} {event[key]!r}, not a number of µs that Perfetto can "
                               "hold (a finite JSON number from 0 to int64 ns)")
    return None


def load_lenient(raw: bytes):
    """``orjson.loads``, with bytes that are not UTF-8 replaced (U+FFFD) rather than refused,
    and lone surrogate escapes (``"\\udce9"``: Python's ``json`` writes them for file names that
    are not UTF-8) read by the standard library, which takes them, and replaced alike: Perfetto
    loads such names, so they must not fail the merge.

    Raises:
        orjson.JSONDecodeError: the text is not JSON.
    """
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "surrogate" in str(exc):
            try:
                value = json.loads(raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw)
            except ValueError:
                raise exc from None
            # each lone surrogate becomes U+FFFD, as bytes that are not UTF-8 do (orjson cannot
            # write a lone surrogate back: --combine rewrites these events)
            raw = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
        elif "UTF-8" not in str(exc):
            raise
    return orjson.loads(raw.decode("utf-8", "replace"))


def kept_text(kept: dict) -> bytes:
    """Top-level members as JSON text, comma-separated (empty for none)."""
    return b", ".join(orjson.dumps(key) + b": " + orjson.dumps(value) for key, value in kept.items())
