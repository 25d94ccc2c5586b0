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
# Proton names its output `<name>[.part_<N>].<format>`: `.hatchet` / `.hatchet_msgpack` for its
# tree data (data="tree", the default), `.chrome_trace` for a trace (third_party/proton Data.cpp)
_HATCHET_NAME_RE = re.compile(r"\.hatchet(?:_msgpack)?(?:\.gz)?$")
# a trace event's keys in the first object of an array: Chrome's JSON Array Format
_ARRAY_TRACE_RE = re.compile(rb'^\s*\[\s*\{[^{}]*"ph"\s*:')
# the end of a merged file: its "tokentrace" block (written last) with the ranks it holds
_MERGED_RE = re.compile(rb'"tokentrace"\s*:\s*\{.*"ranks"\s*:.*\}\s*\}\s*$', re.S)
# torch profiler (Kineto) chrome traces: Kineto writes `schemaVersion` and `deviceProperties` first
# (`traceName` comes at the end); a re-serialised trace still has them before `traceEvents` when
# its keys are sorted. Else its host/GPU categories tell it: Proton and VizTracer use none of these.
_KINETO_TOP_RE = re.compile(rb'^\{\s*"(?:schemaVersion|deviceProperties|traceName|distributedInfo)"\s*:')
_KINETO_MARKERS = (b'"schemaVersion"', b'"deviceProperties"', b'"traceName"', b'"distributedInfo"')
# Every generation's categories: today's lower-case ones and flows `ac2g`; 2023's flows
# `async_cpu_to_gpu`; 2021-2022's capitalised `Kernel`, `Runtime`, `Memcpy`, ... with flows
# `async_gpu` (a 2022 trace opens with `traceEvents`, so only its events tell it). Case matters:
# Proton writes `kernel`, which is not Kineto's alone.
_KINETO_CAT_RE = re.compile(
    rb'"cat"\s*:\s*"(?:cpu_op|cuda_runtime|cuda_driver|python_function|gpu_memcpy|gpu_memset|'
    rb'gpu_user_annotation|user_annotation|ac2g|async_cpu_to_gpu|async_gpu|'
    rb'Kernel|Runtime|Driver|Memcpy|Memset|Operator|Python|Trace|cuda_sync)"'
)
# A PyTorch Execution Trace (torch.profiler.ExecutionTraceObserver): a graph of operator nodes,
# no timeline. Its top level holds `schema` and `nodes` (and `pid`, `time`, `start_ts`).
_ET_SCHEMA_RE = re.compile(rb'"schema"\s*:\s*"')
_ET_NODES_RE = re.compile(rb'"nodes"\s*:\s*\[')


class TraceKind(enum.Enum):
    """What a file holds, judged from its first bytes."""

    VIZTRACER = "VizTracer report"
    PROTON = "Proton chrome trace"
    KINETO = "torch profiler (Kineto) trace"
    PROTON_HATCHET = "Proton hatchet profile"
    CHROME_ARRAY = "Chrome trace in its array form"
    MERGED = "merged trace (written by tokentrace merge)"
    EXECUTION_TRACE = "PyTorch Execution Trace"
    EMPTY = "empty file"
    UNKNOWN = "not a JSON trace"


def described(kind: TraceKind) -> str:
    """``kind`` as the complement of "is": "a VizTracer report", "an empty file", "not a JSON
    trace" (a bare article before a negation reads "a not a JSON trace")."""
    if kind is TraceKind.UNKNOWN:
        return kind.value
    return f"{'an' if kind.value[0] in 'aeiouAEIOU' else 'a'} {kind.value}"


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
        # Proton's hatchet_msgpack is binary: only its name (`<name>.hatchet_msgpack`) tells it
        return TraceKind.PROTON_HATCHET if is_hatchet_name(path) else TraceKind.UNKNOWN
    if _is_execution_trace(head):
        return TraceKind.EXECUTION_TRACE
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


def _is_execution_trace(head: bytes) -> bool:
    """A top level with ``schema`` and ``nodes`` and no trace events (in any key order)."""
    return (b'"traceEvents"' not in head and _ET_SCHEMA_RE.search(head) is not None
            and _ET_NODES_RE.search(head) is not None)


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
        return hatchet_message(path)
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
    if found is TraceKind.EXECUTION_TRACE:
        return execution_trace_message(path)
    return (
        f"{path} is {described(found)}, but a {expected.value} was expected here; "
        "check the order of the files (VIZTRACER.json first, then the GPU trace) or their names"
    )


def is_hatchet_name(path: Path) -> bool:
    """True for Proton's tree-data output names: ``*.hatchet``, ``*.hatchet_msgpack`` (``.gz`` too)."""
    return _HATCHET_NAME_RE.search(path.name) is not None


def hatchet_message(path: Path) -> str:
    """One line for a Proton hatchet profile: what it is and the settings that record a trace."""
    return (
        f"{path} is a Proton hatchet profile (aggregated, no timeline); record a trace: "
        'proton.start(..., data="trace") and finalize with output_format "chrome_trace" (a '
        ".chrome_trace file); tokenspeed: TOKENSPEED_KERNEL_PROFILE_DATA=trace and "
        "TOKENSPEED_KERNEL_PROFILE_OUTPUT_FORMAT=chrome_trace"
    )


def execution_trace_message(path: Path) -> str:
    """One line for a PyTorch Execution Trace given where a profiler trace belongs."""
    return (
        f"{path}: a PyTorch Execution Trace, not a profiler trace; record with torch.profiler.profile("
        "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], on_trace_ready="
        "tensorboard_trace_handler(DIR)) and pass the trace it writes (an Execution Trace holds the "
        "operator graph, no timeline)"
    )


def not_analyzable_message(path: Path, kind: TraceKind) -> str:
    """One line for a single file ``tokentrace analyze`` cannot take: what it is, what to pass."""
    if kind is TraceKind.EXECUTION_TRACE:
        return execution_trace_message(path)
    if kind is TraceKind.PROTON_HATCHET:
        return mismatch_message(path, TraceKind.PROTON, kind)
    if kind is TraceKind.EMPTY:
        return f"{path}: an empty file; re-record it or wait until it is written"
    return (
        f"{path}: {described(kind)}; tokentrace analyze takes a profile folder, a merged trace or a "
        "torch-profiler trace: pass the folder that holds it and the other half of its pair"
    )
