"""Telling trace kinds apart from their first bytes (no full parse)."""

from __future__ import annotations

import enum
import re
from pathlib import Path

from tokentrace.errors import InputError
from tokentrace.sources.fileio import read_head

_VIZ_MARKERS = (b'"FEE"', b'"viztracer_metadata"', b'"MainProcess"')
_PROTON_MARKERS = (b'"kernel"', b"launch->kernel", b'"GPU Stream', b'"call_stack"', b'"baseTimeNanoseconds"')
_HATCHET_RE = re.compile(rb'^\s*\[\s*\{.*"(frame|metrics|children)"', re.S)


class TraceKind(enum.Enum):
    """What a file holds, judged from its first bytes."""

    VIZTRACER = "VizTracer report"
    PROTON = "Proton chrome trace"
    PROTON_HATCHET = "Proton hatchet profile"
    EMPTY = "empty file"
    UNKNOWN = "not a JSON trace"


def sniff(path: Path) -> TraceKind:
    """Guesses the kind of ``path`` from its first 64 KiB (decompressed)."""
    head = read_head(path)
    stripped = head.lstrip()
    if not stripped:
        return TraceKind.EMPTY
    if _HATCHET_RE.match(stripped[:4096]):
        return TraceKind.PROTON_HATCHET
    if not stripped.startswith(b"{"):
        return TraceKind.UNKNOWN
    if any(marker in head for marker in _VIZ_MARKERS):
        return TraceKind.VIZTRACER
    if any(marker in head for marker in _PROTON_MARKERS):
        return TraceKind.PROTON
    return TraceKind.UNKNOWN


def require_kind(path: Path, expected: TraceKind) -> None:
    """Checks that ``path`` holds ``expected`` before it is read in earnest.

    Raises:
        InputError: the file is of another kind, with what to do about it.
    """
    kind = sniff(path)
    if kind is expected or kind is TraceKind.UNKNOWN:
        return  # UNKNOWN: the reader's full parse gives the precise JSON error
    raise InputError(mismatch_message(path, expected, kind))


def mismatch_message(path: Path, expected: TraceKind, found: TraceKind) -> str:
    """One line: what was expected, what the file is, and what to do."""
    if found is TraceKind.PROTON_HATCHET:
        return (
            f"{path} is a Proton hatchet profile (aggregated, no timeline); record a trace with "
            'proton.start(..., data="trace") to get a .chrome_trace file'
        )
    if found is TraceKind.EMPTY:
        return f"{path} is empty; expected a {expected.value}; re-record it or wait until it is written"
    return (
        f"{path} is a {found.value}, but a {expected.value} was expected here; "
        "check the order of the files (VIZTRACER.json first, then PROTON.chrome_trace) or their names"
    )
