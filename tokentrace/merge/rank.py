"""One rank -> one merged file: host events copied byte for byte, Proton events rewritten."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import orjson

from tokentrace.align.policy import (
    Alignment,
    align,
    estimate_from_events,
    may_need_estimate,
    missing_anchor_error,
    needs_estimate,
)
from tokentrace.atomic import atomic_output
from tokentrace.errors import TokentraceWarning
from tokentrace.merge.gpu_events import build_events, shifted
from tokentrace.merge.host_copy import HostCopy
from tokentrace.merge.ids import IdAllocator
from tokentrace.merge.metadata import block, gpu_process_events, host_process_events, rank_instant
from tokentrace.options import AlignMode, MergeOptions
from tokentrace.sources.discover import RankFiles
from tokentrace.sources.proton import ProtonTrace, read_proton
from tokentrace.sources.viztracer import VizInfo, peek_base_ns
from tokentrace.units import ns_to_us_text, us_to_ns


@dataclasses.dataclass
class RankResult:
    """What the merge did for one rank.

    Attributes:
        tag: the rank tag (str form, e.g. ``TP1``).
        viztracer: the VizTracer input.
        proton: the Proton input(s).
        alignment: the offset and how it was obtained.
        host_pid: the VizTracer process id (in a combined file: its fresh pid).
        gpu_pid: the pid of the rank's Proton process in the output.
        n_kernels: kernels written (equals the Proton input's).
        n_flows: launch->kernel arrows written.
        n_extra_lanes: stream/CPU lanes added for overlapping events.
        viz_overflow: VizTracer's buffer overflowed.
        viz_first_ts_ns: earliest host event (VizTracer axis, ns).
        time_origin_unix_ns: Unix ns of ts 0 in this rank's output (``None`` without anchor).
        output: the per-rank merged file, ``None`` when only a combined file was written.
        warnings: the warnings raised for this rank.
    """

    tag: str
    viztracer: Path
    proton: list[Path]
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
    output: Path | None = None
    warnings: list[str] = dataclasses.field(default_factory=list)

    def record(self) -> dict:
        """The rank's entry of the ``tokentrace`` block."""
        return {
            "rank": self.tag, "viztracer": str(self.viztracer), "proton": [str(p) for p in self.proton],
            "align_method": self.alignment.method, "offset_ns": self.alignment.offset_ns,
            "offset_lo_ns": self.alignment.lo_ns, "offset_hi_ns": self.alignment.hi_ns,
            "anchor_consistent": self.alignment.anchor_consistent, "host_pid": self.host_pid, "gpu_pid": self.gpu_pid, "warnings": list(self.warnings),
        }


def merge_rank(files: RankFiles, output: Path, options: MergeOptions) -> RankResult:
    """Merges one rank's VizTracer + Proton files into ``output`` (see docs/merged-format.md).

    Raises:
        InputError: an input is missing, of the wrong kind, truncated or being written.
        AlignmentError: no anchor and no offset.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TokentraceWarning)
        request = _AlignRequest(options.align, options.offset_us, options.check_anchors)
        result = _merge_rank(files, output, request, options.compress)
    result.warnings = [str(w.message) for w in caught if issubclass(w.category, TokentraceWarning)]
    return result


@dataclasses.dataclass(frozen=True)
class _AlignRequest:
    """The user's alignment options for one rank."""

    mode: AlignMode
    offset_us: float | None
    check_anchors: bool


def _merge_rank(files: RankFiles, output: Path, request: _AlignRequest, compress: bool) -> RankResult:
    with atomic_output(output, compress) as write:
        write(b'{"traceEvents": [\n')
        collect = may_need_estimate(request.mode, request.offset_us, request.check_anchors)
        with HostCopy(files.viztracer, write, write.plain, collect) as host:
            proton = read_proton(files.proton)
            if proton.base_ns is None and request.mode is AlignMode.ANCHORS and request.offset_us is None:
                raise missing_anchor_error(files.viztracer, None, files.proton[0])
            kernels = proton.kernels() if collect else ()
            early = _prepare_gpu(files, request, proton)
            viz, host_events = host.result()
        evidence = None
        if needs_estimate(request.mode, request.offset_us, request.check_anchors, proton.base_ns):
            evidence = estimate_from_events(host_events, kernels)
        warn_overflow(viz)
        alignment = align(
            request.mode, files.viztracer, viz.base_ns, files.proton[0], proton.base_ns, (),
            request.offset_us, rank=str(files.tag), check_anchors=request.check_anchors,
            evidence=evidence,
        )
        place = RankPlacement(alignment.offset_ns, 1, 0)
        ids, gpu = _gpu_side(early, viz, proton, alignment)
        result, events = rank_events(files, viz, proton, alignment, ids, place, gpu)
        events[:0] = host_process_events(result.tag, sorted(viz.pids), viz.main_pid, 0)
        write((b",\n" if viz.has_events else b"") + b",\n".join(events))
        write(b'\n],\n"displayTimeUnit": "ns",\n"tokentrace": ')
        record = block([result.record()], combined=False, origin=result.time_origin_unix_ns)
        write(orjson.dumps(record, option=orjson.OPT_SORT_KEYS) + b"}\n")
    result.output = output
    return result


def _prepare_gpu(files: RankFiles, request: _AlignRequest, proton: ProtonTrace):
    """The Proton events built while the host copy runs, on a guessed offset.

    Building them needs the offset and the host ids, both known only when the copy ends. The
    offset is guessed (``--offset-us``, else the anchors with the VizTracer one read from a plain
    report's tail by :func:`peek_base_ns`, else 0) and the fresh ids are taken as if no host id
    were that large; :func:`_gpu_side` checks both (measured t39 TP0: 80-140 ms off the path
    after the copy). Returns ``(offset_ns, ids, (gpu_pid, ProtonOutput))``.
    """
    offset = 0
    if request.offset_us is not None:
        offset = us_to_ns(request.offset_us)
    elif proton.base_ns is not None and (viz_base := peek_base_ns(files.viztracer)) is not None:
        offset = proton.base_ns - viz_base
    ids = IdAllocator()
    gpu_pid = ids.take()
    return offset, ids, (gpu_pid, build_events(proton, offset, gpu_pid, ids, 1))


def _gpu_side(early, viz: VizInfo, proton: ProtonTrace, alignment: Alignment) -> tuple[IdAllocator, tuple | None]:
    """The id allocator and the early Proton events (times redone on a wrong offset guess) when
    no host id clashes with the ids taken early, else a fresh allocator."""
    host_ids = viz.pids | viz.tids
    offset, ids, (gpu_pid, gpu) = early
    if not ids.clashes(host_ids):
        ids.reserve(host_ids)
        return ids, (gpu_pid, shifted(gpu, proton, alignment.offset_ns, offset))
    return IdAllocator(host_ids), None


@dataclasses.dataclass(frozen=True)
class RankPlacement:
    """Where a rank goes in the output file.

    Attributes:
        proton_shift_ns: added to Proton times (the offset, plus the common-axis shift).
        flow_base: first flow id of the rank.
        sort_index: the host process's sort index (the GPU process gets the next one).
        host_shift_ns: added to host times (0 in a per-rank file).
        host_pid: the host pid in the output (fresh in a combined file).
        host_main_tid: the launching thread's tid in the output.
    """

    proton_shift_ns: int
    flow_base: int
    sort_index: int
    host_shift_ns: int = 0
    host_pid: int | None = None
    host_main_tid: int | None = None


def rank_events(
    files: RankFiles, viz: VizInfo, proton: ProtonTrace, alignment: Alignment, ids: IdAllocator,
    place: RankPlacement, built: tuple | None = None,
) -> tuple[RankResult, list[bytes]]:
    """The rank's Proton events and GPU metadata (not the host names), and its result record.

    ``built``: ``(gpu_pid, ProtonOutput)`` already made with ``ids`` for this placement.
    """
    if built is None:
        gpu_pid = ids.take()
        built = gpu_pid, build_events(proton, place.proton_shift_ns, gpu_pid, ids, place.flow_base)
    gpu_pid, gpu = built
    host_first = None if viz.first_ts_ns is None else viz.first_ts_ns + place.host_shift_ns
    first_ts = min((t for t in (host_first, gpu.first_ts_ns) if t is not None), default=0)
    origin = None if viz.base_ns is None else viz.base_ns - place.host_shift_ns
    result = RankResult(
        str(files.tag), files.viztracer, list(files.proton), alignment,
        place.host_pid if place.host_pid is not None else viz.main_pid, gpu_pid, gpu.n_kernels,
        gpu.n_flows, gpu.n_extra_lanes, viz.overflow, viz.first_ts_ns, origin, proton.dialect,
    )
    args = _instant_args(files, result, viz, place)
    args["viz_first_ts_ns"] = host_first  # on the output axis
    events = gpu.events + gpu_process_events(result.tag, gpu_pid, gpu, place.sort_index + 1)
    events += rank_instant(gpu_pid, ids.take(), first_ts, args)
    return result, events


def _instant_args(files: RankFiles, result: RankResult, viz: VizInfo, place: RankPlacement) -> dict:
    align_ = result.alignment
    return {
        **files.tag.as_args(), "host_pid": result.host_pid,
        "host_main_tid": place.host_main_tid if place.host_main_tid is not None else viz.main_tid,
        "gpu_pid": result.gpu_pid, "align_method": align_.method, "offset_ns": align_.offset_ns,
        "offset_lo_ns": align_.lo_ns, "offset_hi_ns": align_.hi_ns,
        "anchor_consistent": align_.anchor_consistent, "viz_overflow": viz.overflow,
        "viz_first_ts_ns": viz.first_ts_ns, "proton_dialect": result.proton_dialect,
        "proton_kernels": result.n_kernels, "proton_flows": result.n_flows,
        "time_origin_unix_ns": result.time_origin_unix_ns,
    }


def warn_overflow(viz: VizInfo) -> None:
    """Warns that VizTracer's ring buffer wrapped, naming the time before which events are missing."""
    if viz.overflow:
        first = "unknown" if viz.first_ts_ns is None else ns_to_us_text(viz.first_ts_ns) + " µs"
        warnings.warn(
            f"{viz.path}: VizTracer's buffer overflowed; host events before ts {first} (the first "
            "host event) are missing; record fewer steps or raise tracer_entries",
            TokentraceWarning, stacklevel=2,
        )
