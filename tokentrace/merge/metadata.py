"""Metadata of the merged file: process/thread names, sort order, the ``tokentrace.rank``
instant and the top-level ``tokentrace`` block (docs/merged-format.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from tokentrace.sources.event_fields import kept_text
from tokentrace.units import ns_to_us_text

if TYPE_CHECKING:
    from tokentrace.merge.gpu_events import ProtonOutput


def _meta(name: str, pid: int, tid: int, args: dict) -> bytes:
    event = {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}
    return orjson.dumps(event, option=orjson.OPT_SORT_KEYS)


def host_process_events(tag: str, pids: list[int], main_pid: int | None, sort_index: int) -> list[bytes]:
    """Names the rank's host process(es) ``<tag> host``; they sort just above the GPU process.

    Written after the VizTracer events so these names win over VizTracer's ``MainProcess``.
    """
    events = []
    for pid in pids:
        name = f"{tag} host" if pid == main_pid or len(pids) == 1 else f"{tag} host (pid {pid})"
        events.append(_meta("process_name", pid, pid, {"name": name}))
        events.append(_meta("process_sort_index", pid, pid, {"sort_index": sort_index}))
    return events


def gpu_process_events(tag: str, gpu: ProtonOutput, sort_index: int) -> list[bytes]:
    """Names the rank's GPU process (after what recorded it) and its threads, in lane order."""
    recorder = "torch profiler" if gpu.dialect == "kineto" else "Proton"
    events = [
        _meta("process_name", gpu.pid, gpu.pid, {"name": f"{tag} {recorder} (GPU)"}),
        _meta("process_sort_index", gpu.pid, gpu.pid, {"sort_index": sort_index}),
    ]
    for thread in gpu.threads:
        events.append(_meta("thread_name", gpu.pid, thread.tid, {"name": thread.name}))
        events.append(_meta("thread_sort_index", gpu.pid, thread.tid, {"sort_index": thread.sort_index}))
    return events


def rank_instant(gpu_pid: int, tid: int, ts_ns: int, args: dict) -> list[bytes]:
    """The ``tokentrace.rank`` instant (SQL reads the merge record from it) and its thread."""
    instant = {
        "ph": "i", "s": "t", "name": "tokentrace.rank", "cat": "tokentrace", "pid": gpu_pid,
        "tid": tid, "ts": orjson.Fragment(ns_to_us_text(ts_ns)), "args": args,
    }
    return [
        _meta("thread_name", gpu_pid, tid, {"name": "tokentrace"}),
        _meta("thread_sort_index", gpu_pid, tid, {"sort_index": -1}),
        orjson.dumps(instant, option=orjson.OPT_SORT_KEYS),
    ]


def block(records: list[dict], combined: bool, origin: int | None, version: str) -> dict:
    """The top-level ``tokentrace`` block; ``version`` is the tool's
    (:func:`~tokentrace.version.tool_version`, which the per-rank merge reads during its copy:
    its first use searches the installed package metadata)."""
    return {"version": version, "combined": combined, "time_origin_unix_ns": origin, "ranks": records}


def kept_members(kept: bytes | dict) -> bytes:
    """Kept top-level members (``viztracer_metadata``, ``file_info``) for the merged file's top
    level, followed by a comma: as text already (a per-rank report's), or as objects (the
    combined file's); empty when there are none."""
    if isinstance(kept, dict):
        kept = kept_text(kept)
    return kept + b",\n" if kept else b""
