"""Who recorded a torch-profiler (Kineto) trace: its rank in the world and whether it saw a GPU.

A folder of torch-profiler traces named by torch's ``tensorboard_trace_handler``
(``<worker>.<ns>.pt.trace.json[.gz]``, worker = ``<host>_<pid>`` by default) carries no rank in
its names; the trace does: Kineto writes ``distributedInfo`` (``rank``, ``world_size``, and since
2023 ``pg_config``, the process groups) whenever ``torch.distributed`` is up -- near the top of the
file since 2023, at the very end in 2022 traces. A CPU-only trace (``ProfilerActivity.CPU`` only:
vLLM's API server, a gloo rank) has no GPU activity category (``kernel`` / ``gpu_memcpy`` /
``gpu_memset``, ``Kernel`` / ``Memcpy`` / ``Memset`` in 2022) and is no rank of the GPU figures.

Both facts come from one pass over the raw bytes (no JSON parse of the events): the identity from
the head when it is there, else from wherever the stream holds it; the pass ends at the first GPU
event once the identity is known (*measured*: 68 ms for the 34 MB worst case of
``../shared/traces/peers``, whose first GPU event is 14 KB from the end).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from tokentrace.sources.fileio import iter_chunks, read_head

# torch's tensorboard_trace_handler: f"{worker_name}.{time.time_ns()}.pt.trace.json[.gz]"
_HANDLER_RE = re.compile(r"^(?P<worker>.+)\.(?P<ns>\d{6,})\.pt\.trace\.json(?:\.gz)?$")
_INFO_RE = re.compile(rb'"distributedInfo"\s*:\s*')
_CAT_RE = re.compile(rb'"cat"\s*:')
_GPU_CAT_RE = re.compile(rb'"cat"\s*:\s*"(?i:kernel|gpu_memcpy|gpu_memset|memcpy|memset)"')
_OVERLAP = 96  # bytes kept across chunk joints: longer than any match above
_MAX_INFO_BYTES = 16 << 20  # a distributedInfo larger than this is not one (pg_config of 300 ranks: 16 KB)
_DECODER = json.JSONDecoder()


@dataclasses.dataclass(frozen=True)
class ProcessGroup:
    """One entry of ``distributedInfo.pg_config``: a process group and its global ranks."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class KinetoIdentity:
    """What a torch-profiler trace says about the process that wrote it.

    Attributes:
        path: the trace file.
        rank: ``distributedInfo.rank``; ``None`` when the trace has none (no torch.distributed).
        world_size: ``distributedInfo.world_size``; ``None`` when absent (2022 traces).
        groups: ``distributedInfo.pg_config``, the process-group layout; ``()`` when absent.
        has_gpu: the trace holds at least one GPU activity event.
        has_events: the trace holds at least one categorised event (``False`` for an empty or cut
            file: not a CPU-only trace, its reader says what is wrong).
        worker: the ``tensorboard_trace_handler`` worker name (``<host>_<pid>`` by default);
            ``None`` when the file is not named so.
        window_ns: the ``time_ns()`` of the same name (when the profiler window was written).
    """

    path: Path
    rank: int | None
    world_size: int | None
    groups: tuple[ProcessGroup, ...]
    has_gpu: bool
    worker: str | None
    window_ns: int | None
    has_events: bool = True


def handler_name(path: Path) -> tuple[str, int] | None:
    """``(worker, ns)`` of a ``tensorboard_trace_handler`` file name; ``None`` for other names."""
    match = _HANDLER_RE.match(path.name)
    return (match["worker"], int(match["ns"])) if match else None


def read_identity(path: Path, *, gpu: bool = True) -> KinetoIdentity:
    """Reads ``path``'s rank identity and, with ``gpu``, whether it holds GPU activity.

    Without ``gpu`` only the head (64 KiB) is read when it holds ``distributedInfo``; the rest of
    the file is streamed only when needed.

    Raises:
        InputError: the file cannot be read, or its gzip stream is corrupt.
    """
    named = handler_name(path)
    has_gpu, has_events = False, True
    info = _decode_info(read_head(path))
    if info is None or gpu:
        info, has_gpu, has_events = _scan(path, info, gpu)
    return KinetoIdentity(
        path=path,
        rank=_int(info.get("rank")) if info else None,
        world_size=_int(info.get("world_size")) if info else None,
        groups=_groups(info.get("pg_config")) if info else (),
        has_gpu=has_gpu,
        worker=named[0] if named else None,
        window_ns=named[1] if named else None,
        has_events=has_events,
    )


def _scan(path: Path, info: dict | None, gpu: bool) -> tuple[dict | None, bool, bool]:
    """One pass over the stream: ``distributedInfo`` (unless already known), the first GPU event,
    and whether any categorised event was seen."""
    has_gpu, has_events, tail, pending = False, False, b"", None  # pending: from a distributedInfo key on
    for chunk in iter_chunks(path):
        if pending is not None:
            pending += chunk
            info, pending = _finish(pending)
        elif info is None:
            match = _search(_INFO_RE, tail, chunk)
            if match:
                joint = match.string is not chunk  # matched across the joint: the chunk's rest follows
                info, pending = _finish(match.string[match.end():] + (chunk[_OVERLAP:] if joint else b""))
        if gpu and not has_gpu:
            has_gpu = _search(_GPU_CAT_RE, tail, chunk) is not None
        if not has_events:
            has_events = has_gpu or _search(_CAT_RE, tail, chunk) is not None
        if info is not None and pending is None and (has_gpu or not gpu):
            break
        tail = chunk[-_OVERLAP:] if len(chunk) >= _OVERLAP else (tail + chunk)[-_OVERLAP:]
    return info, has_gpu, has_events or has_gpu


def _search(pattern: re.Pattern, tail: bytes, chunk: bytes) -> re.Match | None:
    """The first match in ``chunk`` or across its joint with the previous chunk's ``tail``,
    without copying the chunk."""
    return pattern.search(tail + chunk[:_OVERLAP]) or pattern.search(chunk)


def _finish(data: bytes) -> tuple[dict | None, bytes | None]:
    """Decodes the object that ``data`` starts with: ``(info, None)``, or ``(None, data)`` when it
    is cut (more bytes needed), or ``(None, None)`` when it is no object."""
    info = _decode_object(data)
    if info is not None:
        return info, None
    if len(data) < _MAX_INFO_BYTES and data.lstrip()[:1] == b"{":
        return None, data
    return None, None


def _decode_info(head: bytes) -> dict | None:
    match = _INFO_RE.search(head)
    return _decode_object(head[match.end():]) if match else None


def _decode_object(data: bytes) -> dict | None:
    try:
        value, _ = _DECODER.raw_decode(data.decode("utf-8", "replace"))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _groups(config: object) -> tuple[ProcessGroup, ...]:
    if not isinstance(config, list):
        return ()
    groups = []
    for item in config:
        if isinstance(item, dict) and isinstance(item.get("ranks"), list):
            ranks = tuple(r for r in map(_int, item["ranks"]) if r is not None)
            groups.append(ProcessGroup(str(item.get("pg_name", "")), str(item.get("pg_desc", "")), ranks))
    return tuple(groups)


def describe(identity: KinetoIdentity) -> str:
    """``rank 1 of 8`` / ``rank 1`` / ``no distributedInfo``: how messages name the identity."""
    if identity.rank is None:
        return "no distributedInfo"
    return f"rank {identity.rank}" + (f" of {identity.world_size}" if identity.world_size else "")


def cpu_only_message(path: Path) -> str:
    """The warning for a CPU-only trace left out beside GPU ranks."""
    return (f"{path.name}: a CPU-only torch-profiler trace (no GPU activity): left out of the GPU "
            "figures (an API server or a CPU rank records no kernels)")


__all__ = ["KinetoIdentity", "ProcessGroup", "cpu_only_message", "describe",
           "handler_name", "read_identity"]
