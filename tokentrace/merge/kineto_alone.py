"""One rank recorded by the torch profiler alone: its ``python_function`` events are the host.

With ``with_stack=True`` the trace holds both sides on one clock, so there is nothing to align
(``align_method`` ``shared_clock``, offset 0) and the output keeps the trace's own time axis
(ts 0 = ``baseTimeNanoseconds``). The Python calls become the rank's host process
(:mod:`tokentrace.sources.kineto_host`: VizTracer names, nested); everything else is laid out
as the GPU side (:mod:`tokentrace.sources.kineto`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from tokentrace.align.policy import Alignment
from tokentrace.errors import TokentraceWarning
from tokentrace.merge.gpu_events import build_rows
from tokentrace.merge.ids import IdAllocator
from tokentrace.merge.metadata import host_process_events
from tokentrace.merge.rank_events import RankPlacement, RankResult, finish_rank, rank_events
from tokentrace.runtime.files import Output, atomic_output
from tokentrace.runtime.processes import ForkedCall, can_fork, write_all
from tokentrace.sources._raw import VizInfo
from tokentrace.sources.discover import RankFiles
from tokentrace.sources.kineto import KinetoTrace, read_kineto
from tokentrace.sources.kineto_host import KinetoHost, host_from_python, outline
from tokentrace.version import tool_version

SHARED_CLOCK = Alignment("shared_clock", 0, reason="host and GPU from one torch-profiler trace")


@dataclasses.dataclass(frozen=True)
class KinetoAlone:
    """Both sides of a torch-profiler-only rank.

    Attributes:
        trace: the trace, ``python_function`` events kept apart (:attr:`KinetoTrace.python`).
        viz: what the merge's host side needs to know (ids, anchor, first time), told before
            the host timeline is built (:meth:`host`).
    """

    trace: KinetoTrace
    viz: VizInfo

    def host(self) -> KinetoHost:
        """The host timeline built from the Python calls."""
        return host_from_python(self.trace.python, self.viz.main_pid, self.trace.thread_names)


def read_kineto_alone(files: RankFiles) -> KinetoAlone:
    """Reads the rank's trace and outlines its host timeline; warns when it has no Python calls.

    Raises:
        InputError: see :func:`~tokentrace.sources.kineto.read_kineto`.
    """
    path = files.gpu[0]
    trace = read_kineto(path, python_apart=True)
    pid = trace.host_pid if trace.host_pid is not None else 0
    host = outline(trace.python, pid)
    if host.first_ts_ns is None:
        warnings.warn(
            f"{path}: a torch-profiler trace without python_function events and no VizTracer "
            "report: the rank has no host frames, so no gap gets a cause; record with "
            "with_stack=True or with VizTracer beside it",
            TokentraceWarning, stacklevel=2,
        )
    tids = set(host.tids) | ({trace.launch_tid} if trace.launch_tid is not None else set())
    # The thread with the most CUDA runtime calls launches: its Python lane (same tid) is the
    # one to judge gaps on, whichever thread the main one is.
    launch_tid = trace.launch_tid if trace.launch_tid in host.tids else None
    viz = VizInfo(path, trace.gpu.base_ns, pids={pid}, tids=tids, main_pid=pid, first_ts_ns=host.first_ts_ns,
                  has_events=host.first_ts_ns is not None, launch_tid=launch_tid)
    return KinetoAlone(trace, viz)


def merge_kineto_alone(files: RankFiles, output, compress: bool, caught: list,
                       on_open: Callable[[Path], None] | None = None) -> RankResult:
    """Merges a torch-profiler-only rank into ``output`` (see docs/merged-format.md); ``on_open``:
    see :func:`~tokentrace.runtime.files.atomic_output`.

    The host events come first in the file. Where the output is plain and a fork is safe, a
    forked child builds and writes them while this process lays out the GPU side: the two
    take about as long, and the read before them is one pass over the file.
    """
    side = read_kineto_alone(files)
    pid = side.viz.main_pid
    tid_of = {tid: tid for tid in side.viz.tids}
    with atomic_output(output, compress, on_open) as write:
        write(b'{"traceEvents": [\n')
        with _host_beside(side, write, tid_of) as host_result:
            ids = IdAllocator(side.viz.pids | side.viz.tids)
            gpu = build_rows(side.trace.gpu, flow_base=1).serialise(0, ids)
            placed = rank_events(files, side.viz, SHARED_CLOCK, RankPlacement(0, sort_index=0), gpu)
            written, pieces = host_result()
        events = pieces + host_process_events(placed.result.tag, [pid], pid, 0) + placed.events
        finish_rank(write, events, dataclasses.replace(side.viz, has_events=written), placed.result,
                    caught, tool_version())
    placed.result.output = output
    return placed.result


@contextlib.contextmanager
def _host_beside(side: KinetoAlone, write: Output, tid_of: dict[int, int]) -> Iterator[Callable[[], tuple[bool, list]]]:
    """Yields ``result()``: whether the host events are written, and the pieces still to write.

    Where the output is plain and a fork is safe, a forked child builds the host events and
    writes them at the file's offset (shared) while the block runs, which writes nothing before
    ``result()``; the child is stopped when the block raises. Elsewhere ``result()`` builds them
    for the caller to write.
    """
    plain = write.plain
    if plain is None or not side.viz.has_events or not can_fork():
        yield lambda: (False, side.host().serialise(0, side.viz.main_pid, tid_of))
        return
    plain.flush()  # the header, before the child writes after it
    fd, parent = plain.fileno(), os.getpid()
    with ForkedCall(lambda _notify: _write_host(side, fd, parent, tid_of),
                    f"{side.viz.path}: writing its Python calls") as child:
        def result() -> tuple[bool, list]:
            written = child.result()
            plain.seek(0, os.SEEK_END)  # the child moved the shared offset
            return written, []

        yield result


def _write_host(side: KinetoAlone, fd: int, parent: int, tid_of: dict[int, int]) -> bool:
    """In the forked child: the host events written at ``fd``; whether there were any."""
    pieces = side.host().serialise(0, side.viz.main_pid, tid_of)
    for piece in pieces:
        write_all(fd, piece, parent)
    return bool(pieces)
