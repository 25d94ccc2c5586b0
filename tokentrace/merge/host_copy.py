"""Copying a rank's host (VizTracer) events while the Proton side is prepared.

The copy (read, inflate, scan for ids and the earliest ts, pick out the estimator's calls,
write) is most of a rank's merge, and most of it holds the GIL, so in a thread it would take
turns with the Proton side instead of using a second core. Where it can, it runs in a forked
child that writes straight into the output file (the file offset is shared), so it uses the
second core in full; the child sends back only what it found (a few KB, pickled through a
pipe). Elsewhere (no ``fork``, a gzip output, other threads alive) it runs in a thread.

The estimator's launch and wait calls are picked out of the report by ``bytes.find`` of their
names, about a quarter of the copy's own time. Where the caller finds this process's side the
shorter by more than that (``beside``) and the copy runs in a child, this process picks them out
instead, once its GPU side is laid out, in the pass that looks for link starts
(:meth:`HostCopy.read_beside`): the two then end about together, where the child ended last.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import pickle
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from tokentrace.runtime.processes import (
    can_fork,
    fork_child,
    how_it_ended,
    reap,
    stop_child,
    stops_child_on_raise,
    write_all,
)
from tokentrace.runtime.signals import signals_held
from tokentrace.sources._raw import LinkStarts, VizInfo, copy_events, find_link_starts
from tokentrace.sources.host_calls import HostEvents, HostEventsCollector


@dataclasses.dataclass(frozen=True)
class CopiedHost:
    """What the copy found besides the bytes it wrote.

    Attributes:
        viz: the report's metadata and the ids and earliest time of its events.
        calls: the estimator's launch and wait calls (None when not asked to collect them).
    """

    viz: VizInfo
    calls: HostEvents | None


class _Cancelled(Exception):
    """Raised inside the copy thread when the main thread gave up."""


def _copy(path: Path, sink: Callable, collect: bool) -> tuple[VizInfo, HostEvents | None]:
    """The copy itself, with the estimator's extraction riding on it when asked; read as the
    configuration in force says (:mod:`tokentrace.sources.backend`)."""
    collector = HostEventsCollector() if collect else None
    info = copy_events(path, sink, collector.feed if collector else None)
    if collector is None:
        return info, None
    collector.overflow = info.overflow
    return info, collector.result()


class HostCopy:
    """Copies the host events of ``path``; a context manager that never leaves the copy running.

    Usage: ``with HostCopy(path, sink, out) as copy: ...; links = copy.read_beside(True);
    found = copy.result()``. When the body raises, the copy is stopped (the thread at its next
    chunk, the child by :func:`~tokentrace.runtime.processes.stop_child`) before the exception
    leaves the block, so the output file is never written after it was closed. The copy reads
    as the configuration in force where it was made says (:mod:`tokentrace.sources.backend`):
    the child inherits it, the thread runs in a copy of this context.

    Args:
        path: the VizTracer report.
        sink: where the thread variant writes the events.
        out: the plain output file (flushed; the child writes at its offset), None for a thread.
        collect: also pick out the estimator's launch and wait calls.
        beside: pick them out in this process where the copy runs in a child (see the module's
            docstring).
    """

    def __init__(self, path: Path, sink: Callable[[bytes], None], out: BinaryIO | None = None,
                 collect: bool = False, beside: bool = False) -> None:
        self._path, self._sink, self._collect, self._beside = path, sink, collect, beside
        self._context = contextvars.copy_context()  # the reading configuration, for the thread
        self._out = out if out is not None and can_fork() else None
        self._cancel = threading.Event()
        self._found: tuple[VizInfo, HostEvents | None] | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._child: tuple[int, int] | None = None  # pid, read end of the result pipe
        self._calls_here: HostEventsCollector | None = None  # the calls picked out in this process
        self._calls_read = False  # ... and the report read for them

    @stops_child_on_raise
    def __enter__(self) -> "HostCopy":
        if self._out is not None:
            self._out.flush()
            if self._collect and self._beside:  # see the module's docstring
                self._calls_here, self._collect = HostEventsCollector(), False
            # held: a signal inside fork's hooks would be swallowed ("Exception ignored"), and
            # one before the pid is stored would leave the child unknown to __exit__
            with signals_held():
                path, fd, collect = self._path, self._out.fileno(), self._collect
                self._child = fork_child(lambda write_end, parent: _child_copy(path, fd, collect, write_end, parent))
        else:
            self._thread = threading.Thread(target=self._context.run, args=(self._run,), name="tokentrace-host-copy",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._cancel.set()
        if self._thread is not None:
            self._thread.join()
        if self._child is not None:  # still running: the body raised (an error or a signal)
            pid, pipe = self._child
            self._child = None
            stop_child(pid)
            with contextlib.suppress(OSError):
                os.close(pipe)

    def read_beside(self, links: bool) -> LinkStarts:
        """Reads the report in this process while the copy runs, when there is something to read
        it for: its link starts (``links``; else none are returned) and the estimator's calls
        where this process picks them out (see the module's docstring).

        Raises:
            InputError: the report cannot be read (as the copy would say).
        """
        calls = self._calls_here
        if calls is not None and not self._calls_read:
            self._calls_read = True
            found = find_link_starts(self._path, also=calls.feed)
            return found if links else LinkStarts()
        return find_link_starts(self._path) if links else LinkStarts()

    def result(self) -> CopiedHost:
        """Waits for the copy; re-raises its error (an :class:`InputError` names the file)."""
        if self._child is not None:
            pid, pipe = self._child
            payload = _read_all(pipe)  # a signal here leaves _child set: __exit__ kills it
            self._child = None
            os.close(pipe)
            status = reap(pid)
            self._found, self._error = pickle.loads(payload) if payload else (None, _died(self._path, status))
            self._out.seek(0, os.SEEK_END)  # the child moved the shared offset
        elif self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._found is not None  # set whenever no error was stored
        viz, calls = self._found
        if self._calls_here is not None:
            if not self._calls_read:
                self.read_beside(False)
            self._calls_here.overflow = viz.overflow
            calls = self._calls_here.result()
        return CopiedHost(viz, calls)

    def _run(self) -> None:
        try:
            self._found = _copy(self._path, self._write, self._collect)
        except _Cancelled:
            pass
        except BaseException as exc:  # re-raised on the main thread by result()
            self._error = exc

    def _write(self, data: bytes) -> None:
        if self._cancel.is_set():
            raise _Cancelled
        self._sink(data)


def _child_copy(path: Path, fd: int, collect: bool, write_end: int, parent: int) -> None:
    """The forked child's copy (inside :func:`~tokentrace.runtime.processes.fork_child`): the
    events written at ``fd``, what it found sent back pickled through ``write_end``."""
    try:
        found, error = _copy(path, lambda data: write_all(fd, data, parent), collect), None
    except Exception as exc:  # noqa: BLE001 - sent to the parent, raised there
        found, error = None, exc
    try:
        payload = pickle.dumps((found, error))
    except Exception:  # noqa: BLE001 - an unpicklable error: send its text
        payload = pickle.dumps((None, RuntimeError(f"{path}: {error!r}")))
    with os.fdopen(write_end, "wb") as writer:
        writer.write(payload)


def _read_all(fd: int) -> bytes:
    pieces = []
    while piece := os.read(fd, 1 << 16):
        pieces.append(piece)
    return b"".join(pieces)


def _died(path: Path, status: int) -> Exception:
    from tokentrace.errors import InputError

    return InputError(f"{path}: the process copying its events {how_it_ended(status)} without a "
                      "result (out of memory?); run the merge again")
