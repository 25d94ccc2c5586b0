"""The pieces every merged file is written from: a rank's events placed on the common axis
(:func:`rank_events`: the GPU process, the rank's instant with its alignment and provenance),
the file's end (:func:`finish_rank`) and :class:`RankResult`, what the merge did for one rank.
The one-rank merge (:mod:`.rank`), a torch-profiler trace on its own (:mod:`.kineto_alone`), a
rank's part of a combined file (:mod:`.part`) and the ``--combine`` writer (:mod:`.combine`) use
them; they import none of those.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from tokentrace.align.policy import (
    Alignment,
)
from tokentrace.errors import AlignmentError, TokentraceWarning
from tokentrace.merge.metadata import (
    block,
    gpu_process_events,
    kept_members,
    rank_instant,
)
from tokentrace.sources._raw import LinkStarts, VizInfo
from tokentrace.sources.discover import RankFiles
from tokentrace.units import ns_to_us_text

if TYPE_CHECKING:
    from tokentrace.merge.gpu_events import ProtonOutput


@dataclasses.dataclass(frozen=True)
class CombinedPart:
    """A rank's part of the combined file, made by the worker that merged the rank, for
    ``--combine`` to copy when the rank's host axis is the combined one (shift 0) and its host
    ids collide with no other rank's (:mod:`.host_span`).

    Attributes:
        path: the rank's host process names, Proton events, link finishes, GPU names and
            ``tokentrace.rank`` instant, comma-separated, with the combined file's ids
            (:func:`~tokentrace.merge.ids.rank_ids`, :func:`~tokentrace.merge.ids.flow_base`,
            :func:`~tokentrace.sources.links.combined_link_id`).
        record: the rank's entry of the combined file's ``tokentrace`` block (without warnings).
        host_span: where the host events are in the per-rank file (byte offsets).
        host_ids: every pid and tid of the host events.
        link_ids: the scope ids of the link starts the finishes were made for.
        links_read: whether the link starts were looked for (only a rank whose Proton scopes
            carry ids has finishes).
        kept: the report's kept top-level members as JSON text (:attr:`VizInfo.kept`).
        span_links: the link starts of the host span, with where each lies (found by the
            worker: :func:`~tokentrace.sources._raw.find_link_starts`).
    """

    path: Path
    record: dict
    host_span: tuple[int, int]
    host_ids: frozenset[int]
    link_ids: frozenset[int]
    links_read: bool
    kept: bytes = dataclasses.field(default=b"", repr=False)
    span_links: LinkStarts = dataclasses.field(default_factory=LinkStarts, repr=False)


@dataclasses.dataclass
class RankResult:
    """What the merge did for one rank.

    Attributes:
        tag: the rank tag (str form, e.g. ``TP1``).
        viztracer: the VizTracer input (``None``: a torch-profiler trace alone).
        gpu: the GPU trace input(s): Proton parts or one torch-profiler trace.
        alignment: the offset and how it was obtained.
        host_pid: the VizTracer process id (in a combined file that rewrote the rank: its fresh pid).
        gpu_pid: the pid of the rank's GPU process in the output.
        n_kernels: kernels written (equals the Proton input's).
        n_flows: launch->kernel arrows written.
        n_extra_lanes: stream/CPU lanes added for overlapping events.
        viz_overflow: VizTracer's buffer overflowed.
        viz_first_ts_ns: earliest host event (VizTracer axis, ns).
        time_origin_unix_ns: Unix ns of ts 0 in this rank's output (``None`` without anchor).
        output: the per-rank merged file, ``None`` when only a combined file was written.
        warnings: the warnings raised for this rank.
        gpu_format: what recorded the GPU side (``proton`` or ``kineto``).
        gpu_first_ns: earliest GPU-side event in the GPU trace's own time, ``None`` without.
        link_starts: tokenspeed ``viztracer->proton`` link starts in the VizTracer report.
        n_links: link arrows drawn (starts whose Proton scope was found).
        combined_part: the rank's part of the combined file, written beside the per-rank file
            when asked (``merge --combine``), ``None`` otherwise.
    """

    tag: str
    viztracer: Path | None
    gpu: list[Path]
    alignment: Alignment
    host_pid: int | None
    gpu_pid: int
    n_kernels: int
    n_flows: int
    n_extra_lanes: int
    viz_overflow: bool
    viz_first_ts_ns: int | None
    time_origin_unix_ns: int | None
    proton_dialect: str
    gpu_format: str = "proton"
    gpu_first_ns: int | None = None
    output: Path | None = None
    warnings: list[str] = dataclasses.field(default_factory=list)
    link_starts: int = 0
    n_links: int = 0
    combined_part: CombinedPart | None = None

    def record(self) -> dict:
        """The rank's entry of the ``tokentrace`` block."""
        return {
            "rank": self.tag, "viztracer": None if self.viztracer is None else str(self.viztracer),
            "gpu": [str(p) for p in self.gpu], "gpu_format": self.gpu_format,
            "align_method": self.alignment.method, "offset_ns": self.alignment.offset_ns,
            "offset_lo_ns": self.alignment.lo_ns, "offset_hi_ns": self.alignment.hi_ns,
            "offset_width_ns": self.alignment.width_ns, "offset_evidence": self.alignment.evidence,
            "anchor_consistent": self.alignment.anchor_consistent, "host_pid": self.host_pid, "gpu_pid": self.gpu_pid, "warnings": list(self.warnings),
            "link_starts": self.link_starts, "links": self.n_links,
        }


def finish_rank(write, events: list[bytes | memoryview], viz: VizInfo, result: RankResult,
                caught: list[warnings.WarningMessage], version: str) -> None:
    """Writes the events after the host's, the kept report keys and the ``tokentrace`` block."""
    write_joined(write, events, after_host=viz.has_events)
    write(b'\n],\n' + kept_members(viz.kept) + b'"displayTimeUnit": "ns",\n"tokentrace": ')
    result.warnings = warning_messages(caught)  # the block records them
    record = block([result.record()], False, result.time_origin_unix_ns, version)
    write(orjson.dumps(record, option=orjson.OPT_SORT_KEYS) + b"}\n")


def write_joined(write, events: list[bytes | memoryview], after_host: bool) -> None:
    """Writes ``events`` comma-separated, piece by piece: joining them first would copy the
    Proton blob (MBs) once more on the critical path."""
    for index, event in enumerate(events):
        if index or after_host:
            write(b",\n")
        write(event)


@dataclasses.dataclass(frozen=True)
class RankPlacement:
    """Where a rank goes in the output file.

    Attributes:
        proton_shift_ns: added to Proton times (the offset, plus the common-axis shift).
        sort_index: the host process's sort index (the GPU process gets the next one).
        host_shift_ns: added to host times (0 in a per-rank file).
        host_pid: the host pid in the output (fresh in a combined file).
        host_main_tid: the launching thread's tid in the output.
    """

    proton_shift_ns: int
    sort_index: int
    host_shift_ns: int = 0
    host_pid: int | None = None
    host_main_tid: int | None = None


@dataclasses.dataclass(frozen=True)
class RankEvents:
    """A rank's result record and its serialised Proton events and GPU metadata.

    Attributes:
        result: what the merge did for the rank.
        events: the Proton events, the GPU process's names and the ``tokentrace.rank`` instant
            (not the host process's names: the caller writes those with the host events).
    """

    result: RankResult
    events: list[bytes | memoryview]


def rank_events(
    files: RankFiles, viz: VizInfo, alignment: Alignment, place: RankPlacement, gpu: ProtonOutput,
) -> RankEvents:
    """The rank's Proton events, GPU metadata and ``tokentrace.rank`` instant, and its record.

    Args:
        files: the rank's inputs (tag and paths, for the record).
        viz: what the host side holds (anchor, first time, main pid/tid, overflow).
        alignment: the rank's offset and how it was obtained.
        place: where the rank goes; ``gpu`` was serialised with ``place.proton_shift_ns``.
        gpu: the rank's serialised Proton events and ids (:meth:`ProtonRows.serialise`).
    """
    host_first = None if viz.first_ts_ns is None else viz.first_ts_ns + place.host_shift_ns
    first_ts = min((t for t in (host_first, gpu.first_ts_ns) if t is not None), default=0)
    origin = None if viz.base_ns is None else viz.base_ns - place.host_shift_ns
    result = RankResult(
        str(files.tag), files.viztracer, list(files.gpu), alignment,
        place.host_pid if place.host_pid is not None else viz.main_pid, gpu.pid, gpu.n_kernels,
        gpu.n_flows, gpu.n_extra_lanes, viz.overflow, viz.first_ts_ns, origin, gpu.dialect,
        files.gpu_format.value, n_links=gpu.n_links,
        gpu_first_ns=None if gpu.first_ts_ns is None else gpu.first_ts_ns - place.proton_shift_ns,
    )
    args = _instant_args(files, result, viz, place)
    args["viz_first_ts_ns"] = host_first  # on the output axis
    events = gpu.events + gpu_process_events(result.tag, gpu, place.sort_index + 1)
    events += rank_instant(gpu.pid, gpu.rank_tid, first_ts, args)
    return RankEvents(result, events)


def _instant_args(files: RankFiles, result: RankResult, viz: VizInfo, place: RankPlacement) -> dict:
    align_ = result.alignment
    return {
        **files.tag.as_args(), "host_pid": result.host_pid,
        "host_main_tid": place.host_main_tid if place.host_main_tid is not None else viz.main_tid,
        "gpu_pid": result.gpu_pid, "align_method": align_.method, "offset_ns": align_.offset_ns,
        "offset_lo_ns": align_.lo_ns, "offset_hi_ns": align_.hi_ns,
        "offset_width_ns": align_.width_ns, "offset_evidence": align_.evidence,
        "anchor_consistent": align_.anchor_consistent, "viz_overflow": viz.overflow,
        "viz_first_ts_ns": viz.first_ts_ns, "proton_dialect": result.proton_dialect,
        "gpu_format": result.gpu_format,
        "proton_kernels": result.n_kernels, "proton_flows": result.n_flows,
        "time_origin_unix_ns": result.time_origin_unix_ns,
    }


def refuse_negative_times(files: RankFiles, alignment: Alignment, first_ns: int | None, shift_ns: int) -> None:
    """Refuses an offset that puts GPU events before ts 0 (Perfetto drops them).

    Raises:
        AlignmentError: naming the offset, how it was found, and what to do.
    """
    if first_ns is not None and first_ns + shift_ns < 0:
        raise AlignmentError(
            f"{files.gpu[0]}: with the offset {ns_to_us_text(alignment.offset_ns)} µs ({alignment.method}) "
            f"the GPU trace starts at ts {ns_to_us_text(first_ns + shift_ns)} µs, before the host "
            "clock's zero, where Perfetto drops events; check --offset-us (or the files' pairing)")


def warn_unmatched_links(viz_path: Path, starts: int, drawn: int) -> None:
    """Warns about tokenspeed link starts whose Proton scope is not in the trace (their arrow
    cannot be drawn; Perfetto shows them as flows without an end)."""
    if starts > drawn:
        warnings.warn(
            f"{viz_path}: {starts - drawn} of {starts} viztracer->proton link starts (tokenspeed "
            "kernel_scope) have no Proton scope with their scope_id; was Proton stopped before "
            "VizTracer, or are the two files from different runs?",
            TokentraceWarning, stacklevel=2,
        )


def warn_overflow(viz: VizInfo) -> None:
    """Warns that VizTracer's ring buffer wrapped, naming the time before which events are missing."""
    if viz.overflow:
        first = "unknown" if viz.first_ts_ns is None else ns_to_us_text(viz.first_ts_ns) + " µs"
        warnings.warn(
            f"{viz.path}: VizTracer's buffer overflowed; host events before ts {first} (the first "
            "host event) are missing; record fewer steps or raise tracer_entries",
            TokentraceWarning, stacklevel=2,
        )


def warning_messages(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, TokentraceWarning)]
