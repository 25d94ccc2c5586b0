"""Telling trace kinds apart from their first bytes (no full parse)."""

from __future__ import annotations

import enum
import re
from pathlib import Path

from tokentrace.errors import InputError
from tokentrace.sources.fileio import read_head, read_tail

_VIZ_MARKERS = (b'"FEE"', b'"viztracer_metadata"', b'"MainProcess"')
_PROTON_MARKERS = (b'"kernel"', b"launch->kernel", b'"GPU Stream', b'"call_stack"', b'"baseTimeNanoseconds"')
_HATCHET_RE = re.compile(rb'^\s*\[\s*\{.*"(frame|metrics|children)"', re.S)
# a trace event's keys in the first object of an array: Chrome's JSON Array Format
_ARRAY_TRACE_RE = re.compile(rb'^\s*\[\s*\{[^{}]*"ph"\s*:')
# the end of a merged file: its "tokentrace" block (written last) with the ranks it holds
_MERGED_RE = re.compile(rb'"tokentrace"\s*:\s*\{.*"ranks"\s*:.*\}\s*\}\s*$', re.S)
# torch profiler (Kineto) chrome traces: Kineto writes `schemaVersion` and `deviceProperties` first
# (`traceName` comes at the end); a re-serialised trace still has them before `traceEvents` when
# its keys are sorted. Else its host/GPU categories tell it: Proton and VizTracer use none of these.
_KINETO_TOP_RE = re.compile(rb'^\{\s*"(?:schemaVersion|deviceProperties|traceName|distributedInfo)"\s*:')
_KINETO_MARKERS = (b'"schemaVersion"', b'"deviceProperties"', b'"traceName"')
_KINETO_CAT_RE = re.compile(
    rb'"cat"\s*:\s*"(?:cpu_op|cuda_runtime|cuda_driver|python_function|gpu_memcpy|gpu_memset|'
    rb'gpu_user_annotation|ac2g)"'
)


class TraceKind(enum.Enum):
    """What a file holds, judged from its first bytes."""

    VIZTRACER = "VizTracer report"
    PROTON = "Proton chrome trace"
    KINETO = "torch profiler (Kineto) trace"
    PROTON_HATCHET = "Proton hatchet profile"
    CHROME_ARRAY = "Chrome trace in its array form"
    MERGED = "merged trace (written by tokentrace merge)"
    EMPTY = "empty file"
    UNKNOWN = "not a JSON trace"


def sniff(path: Path) -> TraceKind:
    """Guesses the kind of ``path`` from its first 64 KiB (decompressed)."""
    head = read_head(path)
    stripped = head.lstrip()
    if not stripped:
        return TraceKind.EMPTY
    if stripped.startswith(b"[") and _ARRAY_TRACE_RE.match(stripped[:4096]):
        return TraceKind.CHROME_ARRAY  # a bare list of events (JSON Array Format)
    if _HATCHET_RE.match(stripped[:4096]):
        return TraceKind.PROTON_HATCHET
    if not stripped.startswith(b"{"):
        return TraceKind.UNKNOWN
    if _MERGED_RE.search(read_tail(path)):
        return TraceKind.MERGED
    if _KINETO_TOP_RE.match(stripped):
        return TraceKind.KINETO
    if any(marker in head for marker in _VIZ_MARKERS):
        return TraceKind.VIZTRACER
    if any(marker in head for marker in _KINETO_MARKERS) or _KINETO_CAT_RE.search(head):
        return TraceKind.KINETO  # before Proton: Kineto traces also hold "kernel" and the anchor
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
    if found is TraceKind.CHROME_ARRAY:
        return (
            f"{path} is a Chrome trace in its array form (a bare list of events); tokentrace reads "
            f'the object form: wrap the list as {{"traceEvents": [...]}}, or pass the {expected.value} '
            "the profiler wrote"
        )
    if found is TraceKind.MERGED:
        return (
            f"{path} is a merged trace written by tokentrace merge, not a {expected.value}; merge the "
            "rank's original VizTracer report and GPU trace, or open this file as it is (tokentrace "
            "query, the Perfetto UI)"
        )
    if found is TraceKind.EMPTY:
        return f"{path} is empty; expected a {expected.value}; re-record it or wait until it is written"
    return (
        f"{path} is a {found.value}, but a {expected.value} was expected here; "
        "check the order of the files (VIZTRACER.json first, then the GPU trace) or their names"
    )
