"""One rank recorded by the torch profiler alone: its ``python_function`` events are the host.

With ``with_stack=True`` the trace holds both sides on one clock, so there is nothing to align
(``align_method`` ``shared_clock``, offset 0) and the output keeps the trace's own time axis
(ts 0 = ``baseTimeNanoseconds``). The Python calls become the rank's host process
(:mod:`tokentrace.sources.kineto_host`: VizTracer names, nested); everything else is laid out
as the GPU side (:mod:`tokentrace.sources.kineto`).
"""

from __future__ import annotations

import dataclasses
import warnings

from tokentrace.align.policy import Alignment
from tokentrace.errors import TokentraceWarning
from tokentrace.merge.gpu_events import build_rows
from tokentrace.merge.ids import IdAllocator
from tokentrace.merge.metadata import host_process_events
from tokentrace.merge.rank_events import RankPlacement, RankResult, finish_rank, rank_events
from tokentrace.runtime.files import atomic_output
from tokentrace.sources._raw import VizInfo
from tokentrace.sources.discover import RankFiles
from tokentrace.sources.kineto import KinetoTrace, read_kineto
from tokentrace.sources.kineto_host import KinetoHost, host_from_python
from tokentrace.version import tool_version

SHARED_CLOCK = Alignment("shared_clock", 0, reason="host and GPU from one torch-profiler trace")


@dataclasses.dataclass(frozen=True)
class KinetoAlone:
    """Both sides of a torch-profiler-only rank.

    Attributes:
        trace: the trace, ``python_function`` events kept apart.
        host: the host timeline built from them.
        viz: what the merge's host side needs to know (ids, anchor, first time).
    """

    trace: KinetoTrace
    host: KinetoHost
    viz: VizInfo


def read_kineto_alone(files: RankFiles) -> KinetoAlone:
    """Reads the rank's trace and builds its host timeline; warns when it has no Python calls.

    Raises:
        InputError: see :func:`~tokentrace.sources.kineto.read_kineto`.
    """
    path = files.gpu[0]
    trace = read_kineto(path, python_apart=True)
    pid = trace.host_pid if trace.host_pid is not None else 0
    host = host_from_python(trace.python, pid, trace.thread_names)
    trace.python = []  # the host holds them now
    if not host.names:
        warnings.warn(
            f"{path}: a torch-profiler trace without python_function events and no VizTracer "
            "report: the rank has no host frames, so no gap gets a cause; record with "
            "with_stack=True or with VizTracer beside it",
            TokentraceWarning, stacklevel=2,
        )
    tids = set(host.tids) | ({trace.launch_tid} if trace.launch_tid is not None else set())
    # The thread with the most CUDA runtime calls launches: its Python lane (same tid) is the
    # one to judge gaps on, whichever thread the main one is.
    launch_tid = trace.launch_tid if trace.launch_tid in set(host.tids) else None
    viz = VizInfo(path, trace.gpu.base_ns, pids={pid}, tids=tids, main_pid=pid,
                  first_ts_ns=host.first_ts_ns, has_events=bool(host.names), launch_tid=launch_tid)
    return KinetoAlone(trace, host, viz)


def merge_kineto_alone(files: RankFiles, output, compress: bool, caught: list) -> RankResult:
    """Merges a torch-profiler-only rank into ``output`` (see docs/merged-format.md)."""
    side = read_kineto_alone(files)
    with atomic_output(output, compress) as write:
        write(b'{"traceEvents": [\n')
        ids = IdAllocator(side.viz.pids | side.viz.tids)
        gpu = build_rows(side.trace.gpu, flow_base=1).serialise(0, ids)
        placed = rank_events(files, side.viz, SHARED_CLOCK, RankPlacement(0, sort_index=0), gpu)
        pid = next(iter(side.viz.pids))
        host = side.host.serialise(0, pid, {tid: tid for tid in side.viz.tids})
        events = host + host_process_events(placed.result.tag, [pid], pid, 0) + placed.events
        finish_rank(write, events, dataclasses.replace(side.viz, has_events=False), placed.result,
                    caught, tool_version())
    placed.result.output = output
    return placed.result
