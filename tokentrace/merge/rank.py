"""One rank -> one merged file: host events copied byte for byte, Proton events rewritten.

The order is read -> align -> place. While a forked child copies the host events into the
output (:mod:`.host_copy`), this process reads the Proton trace and lays its events out
without offset or ids (:func:`~tokentrace.merge.gpu_events.build_rows`). Once the copy has
given the VizTracer anchor, the host ids and the estimator's calls, :func:`align` picks the
offset and :meth:`~tokentrace.merge.gpu_events.ProtonRows.serialise` writes the Proton events
once, on that offset, with fresh ids that skip the host ids.
:func:`~tokentrace.merge.rank_events.rank_events` adds the
metadata; the ``--combine`` writer (:mod:`.combine`) uses the same pieces.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tokentrace.align.policy import (
    AlignRequest,
    RankEvidence,
    align,
    missing_anchor_error,
)
from tokentrace.errors import TokentraceWarning
from tokentrace.merge.host_copy import CopiedHost, HostCopy
from tokentrace.merge.ids import IdAllocator
from tokentrace.merge.metadata import (
    host_process_events,
)
from tokentrace.merge.rank_events import (
    RankPlacement,
    RankResult,
    finish_rank,
    rank_events,
    refuse_negative_times,
    warn_overflow,
    warn_unmatched_links,
    warning_messages,
)
from tokentrace.options import MergeOptions
from tokentrace.runtime.files import atomic_output
from tokentrace.runtime.processes import collector_paused
from tokentrace.sources.backend import reading
from tokentrace.sources.discover import RankFiles
from tokentrace.sources.fileio import is_gzip
from tokentrace.version import tool_version

if TYPE_CHECKING:
    from tokentrace.align.estimate import KernelEvidence
    from tokentrace.merge.gpu_events import ProtonRows
    from tokentrace.merge.part import PartRequest

_HEADER = b'{"traceEvents": [\n'


def merge_rank(files: RankFiles, output: Path, options: MergeOptions, part: PartRequest | None = None,
               on_open: Callable[[Path], None] | None = None) -> RankResult:
    """Merges one rank's VizTracer + Proton files into ``output`` (see docs/merged-format.md);
    with ``part``, also writes its part of the combined file (:class:`~tokentrace.merge.rank_events.CombinedPart`).
    ``on_open`` gets the path the output is written to while it grows (see
    :func:`~tokentrace.runtime.files.atomic_output`).
    The entry of a rank's task (in the worker process that merges it): every reader below reads
    as ``options.raw`` says (:func:`tokentrace.sources.backend.reading`).

    Raises:
        InputError: an input is missing, of the wrong kind, truncated or being written.
        AlignmentError: no anchor and no offset.
    """
    # The merge makes no cyclic garbage, but it allocates ~10^5 tracked objects (Proton events,
    # rows): every collection walks them all to free nothing, and a full one falls wherever the
    # allocation count crosses its threshold, which can be after the copy, on the critical path.
    with warnings.catch_warnings(record=True) as caught, collector_paused(), reading(options.raw):
        warnings.simplefilter("always", TokentraceWarning)
        if files.viztracer is None:
            from tokentrace.merge.kineto_alone import merge_kineto_alone

            result = merge_kineto_alone(files, output, options.compress, caught, on_open)
        else:
            result = _merge_rank(files, output, AlignRequest.from_options(options), options.compress, caught,
                                 None if options.compress else part, on_open)
    result.warnings = warning_messages(caught)
    return result


@dataclasses.dataclass(frozen=True)
class _GpuSide:
    """The rank's Proton side, read and laid out while the host copy runs.

    The trace itself is not kept: the rows hold all the output needs, and freeing the parsed
    events here, during the copy, keeps their deallocation (~25k events) off the critical path.

    Attributes:
        base_ns: the Proton anchor (``None`` without one).
        rows: its events laid out for output, without offset or ids.
        kernels: the estimator's kernels, indexed (empty when the request never estimates).
    """

    base_ns: int | None
    rows: ProtonRows
    kernels: Sequence[tuple] | KernelEvidence = dataclasses.field(repr=False)


def _merge_rank(files: RankFiles, output: Path, request: AlignRequest, compress: bool,
                caught: list[warnings.WarningMessage], part: PartRequest | None,
                on_open: Callable[[Path], None] | None = None) -> RankResult:
    with atomic_output(output, compress, on_open) as write:
        write(_HEADER)
        with HostCopy(files.viztracer, write, write.plain, request.may_estimate(), _calls_beside(files)) as copy:
            # the child copies meanwhile; which of the two ends last depends on the inputs'
            # sizes (_calls_beside puts the estimator's calls on the side that is shorter)
            gpu = _read_gpu(files, request)
            version = tool_version()  # first use searches the installed package metadata
            # tokenspeed's linked scopes: only a rank whose scopes carry ids can have links
            links = copy.read_beside(bool(gpu.rows.scope_ids))
            host = copy.result()
        # (blanks alone are no events: the span is empty, as the comma after it is left out)
        host_end = write.plain.tell() if write.plain is not None and host.viz.has_events else len(_HEADER)
        host_span = (len(_HEADER), host_end) if write.plain is not None else None
        warn_overflow(host.viz)
        host.viz.warn_not_utf8()  # here, not in the copy: a forked child's warnings are lost
        alignment = align(request, _evidence(files, host, gpu))
        ids = IdAllocator(host.viz.pids | host.viz.tids)
        place = RankPlacement(alignment.offset_ns, sort_index=0)
        refuse_negative_times(files, alignment, gpu.rows.first_ns, place.proton_shift_ns)
        # per-rank file: the host events are copied as they are, so a link keeps its scope id
        proton = gpu.rows.serialise(place.proton_shift_ns, ids, {i: i for i in links.ids})
        warn_unmatched_links(files.viztracer, len(links.ids), proton.n_links)
        placed = rank_events(files, host.viz, alignment, place, proton)
        placed.result.link_starts = len(links.ids)
        events = host_process_events(placed.result.tag, sorted(host.viz.pids), host.viz.main_pid, 0)
        finish_rank(write, events + placed.events, host.viz, placed.result, caught, version)
    placed.result.output = output
    if part is not None and host_span is not None:
        from tokentrace.merge.part import write_part

        placed.result.combined_part = write_part(part, files, output, host, gpu.rows, alignment, links, host_span)
    return placed.result


# This process lays out a GPU trace at 20-30 ns a byte; the host copy's child copies a report at
# about 3.5 ns a byte, and picking the estimator's calls out of it costs about 0.8 ns a byte
# (t39_tp2, engine_mixed and its six-fold replica, on one machine). So this process picks them out
# (HostCopy's `beside`) only where its own side stays the shorter with them: a plain report more
# than this many times the size of a plain GPU trace (t39_tp2: 12; engine_mixed: 2.2). A gzip
# report is inflated once, in the child; a gzip GPU trace makes this side the longer.
CALLS_BESIDE_RATIO = 10


def _calls_beside(files: RankFiles) -> bool:
    """Whether this process, not the host copy's child, picks out the estimator's calls."""
    report, gpu = files.viztracer, files.gpu[0]
    try:
        return not is_gzip(report) and not is_gzip(gpu) \
            and os.path.getsize(report) > CALLS_BESIDE_RATIO * os.path.getsize(gpu)
    except OSError:  # the reads that follow say why
        return False


def _read_gpu(files: RankFiles, request: AlignRequest) -> _GpuSide:
    """Reads the Proton side and lays it out: the CPU work that overlaps the host copy.

    Reading and laying out the Proton events take less than the copy, which handles every byte
    of the host report, so they add nothing to the rank's time; only the serialisation waits
    for the offset and the host ids.

    Raises:
        AlignmentError: ``--align anchors`` and the Proton file has no anchor (known before
            the copy ends, so the merge stops early).
    """
    # imported here, while the child copies, and not with this module: the imports are off the path
    from tokentrace.merge.gpu_events import build_rows
    from tokentrace.sources.gpu_trace import read_gpu_trace

    trace = read_gpu_trace(files)
    if trace.base_ns is None and request.requires_anchors():
        raise missing_anchor_error(files.viztracer, None, files.gpu[0])
    kernels: Sequence[tuple] | KernelEvidence = ()
    if request.may_estimate():
        # the estimator's import and its kernel side, while the child copies
        from tokentrace.align.estimate import prepare_kernels
        from tokentrace.sources.proton import estimator_kernels

        kernels = prepare_kernels(estimator_kernels(trace))
    return _GpuSide(trace.base_ns, build_rows(trace, flow_base=1), kernels)


def _evidence(files: RankFiles, host: CopiedHost, gpu: _GpuSide) -> RankEvidence:
    return RankEvidence(
        str(files.tag), files.viztracer, host.viz.base_ns, files.gpu[0], gpu.base_ns,
        gpu.kernels, host.calls,
    )
