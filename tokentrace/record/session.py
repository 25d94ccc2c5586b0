"""One recording: its window in step marks, the profilers' start and stop order, and the
:func:`record` / :func:`step` pair the program calls.

The window: with ``skip=0`` the profilers start when the ``with`` block is entered; else at the
``skip``-th :func:`step` mark. With ``steps=N`` they stop at the N-th mark after the start; else
when the block ends (also by an exception, ``sys.exit`` or Ctrl-C: what was recorded is
written). Call :func:`step` once per step of the program, at its end (as ``prof.step()`` of the
torch profiler): ``skip=5, steps=50`` then records the 6th to the 55th step.

Order (docs/serving.md): start the GPU profiler, then VizTracer (so the host trace holds no
profiler set-up); stop VizTracer, then the GPU profiler (a Proton scope entered inside the host
window is in the Proton file), then write VizTracer's report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tokentrace.errors import TokentraceWarning
from tokentrace.record.names import current_rank, rank_paths
from tokentrace.record.options import RecordError, RecordOptions, check

if TYPE_CHECKING:
    from tokentrace.record.gpu import ProtonTrace, TorchTrace
    from tokentrace.record.host import HostTrace


class State(str, enum.Enum):
    """Where a recording is in its window."""

    WAITING = "waiting"  # before the window: counting the marks to skip
    RECORDING = "recording"  # both profilers running
    DONE = "done"  # the window is over: the files are written (or nothing was recorded)


@dataclasses.dataclass
class Recording:
    """A recording in progress (what ``with tokentrace.record(...) as rec`` gives).

    Attributes:
        options: what was asked.
        state: where the window is.
        marks: :func:`step` marks seen since the block began.
        first_mark: the mark the window started at (0: at the block's start).
        last_mark: the mark it stopped at (``None``: at the block's end, or not yet).
        rank: the rank in the file names (``None`` before the start).
        files: the files written, once ``state`` is ``DONE``.
    """

    options: RecordOptions
    state: State = State.WAITING
    marks: int = 0
    first_mark: int = 0
    last_mark: int | None = None
    rank: int | None = None
    files: list[Path] = dataclasses.field(default_factory=list)
    _host: HostTrace | None = None
    _gpu: TorchTrace | ProtonTrace | None = None

    def mark(self) -> None:
        """One step ended: starts or stops the window when its mark has come."""
        self.marks += 1
        if self.state is State.WAITING and self.marks == self.options.skip:
            self.start()
        elif (self.state is State.RECORDING and self.options.steps is not None
              and self.marks - self.first_mark == self.options.steps):
            self.last_mark = self.marks
            self.stop()

    def start(self) -> None:
        """Starts the GPU profiler, then VizTracer.

        Raises:
            RecordError: a profiler cannot be imported or started, or the folder holds this
                rank's files already.
        """
        from tokentrace.record.gpu import gpu_trace
        from tokentrace.record.host import HostTrace

        self.state = State.DONE  # whatever fails below, no second start
        self.rank = current_rank(self.options.rank)
        paths = rank_paths(self.options, self.rank)
        gpu = gpu_trace(paths)
        host = HostTrace(paths.host, self.options.tracer_entries)
        gpu.start()
        self._gpu, self._host, self.first_mark = gpu, host, self.marks
        host.start()  # last: its first event is the program's own
        self.state = State.RECORDING

    def stop(self) -> None:
        """Stops VizTracer, then the GPU profiler (which writes its trace), then writes
        VizTracer's report. Does nothing outside the window.

        Raises:
            RecordError: a trace cannot be written.
        """
        if self.state is not State.RECORDING:
            self.state = State.DONE
            return
        self.state = State.DONE
        self._host.stop()
        self.files = [*self._gpu.stop(), self._host.save()]
        self._gpu = self._host = None


_ACTIVE: list[Recording] = []  # the recording step() marks (one at a time)


@contextlib.contextmanager
def record(out: str | Path, gpu: str = "torch", rank: int | None = None, *, skip: int = 0,
           steps: int | None = None, profile_id: str | None = None,
           tracer_entries: int | None = None) -> Iterator[Recording]:
    """Records the block (or the window of it that ``skip`` and ``steps`` choose) into the
    profile folder ``out``, in the files ``tokentrace analyze out`` reads.

    Args:
        out: the profile folder (made when missing); its name is the profile id.
        gpu: ``"torch"`` (torch.profiler) or ``"proton"`` (Triton Proton).
        rank: the rank in the file names when ``torch.distributed`` is not initialised when the
            window starts (default: ``$RANK``, else 0).
        skip: :func:`step` marks to let pass before the window starts (warm-up).
        steps: marks to record; the window stops at the last (default: at the block's end).
        profile_id: the profile id in the names (default: ``out``'s name).
        tracer_entries: VizTracer's ring buffer (default
            :data:`~tokentrace.record.options.DEFAULT_TRACER_ENTRIES`).

    Raises:
        RecordError: bad options, a profiler not installed, another recording running, or the
            folder already holds this rank's files.
    """
    from tokentrace.record.options import DEFAULT_TRACER_ENTRIES

    options = RecordOptions(Path(out), gpu, rank, skip, steps, profile_id,
                            DEFAULT_TRACER_ENTRIES if tracer_entries is None else tracer_entries)
    check(options)
    if _ACTIVE:
        raise RecordError(f"a recording into {_ACTIVE[-1].options.out} is running already; one at a time")
    recording = Recording(options)
    _ACTIVE.append(recording)
    try:
        if options.skip == 0:
            recording.start()
        yield recording
    finally:
        _ACTIVE.remove(recording)
        recording.stop()  # also when the block raised: what was recorded is written
    if recording.rank is None:
        warnings.warn(f"nothing recorded into {options.out}: the window starts at step mark {options.skip} "
                      f"and the program made {recording.marks} (call tokentrace.step() once per step)",
                      TokentraceWarning, stacklevel=3)


def step() -> None:
    """Marks the end of one step of the program: the recording's window (``skip``, ``steps``)
    counts these. Outside a recording it does nothing, so a program may always call it."""
    if _ACTIVE:
        _ACTIVE[-1].mark()
