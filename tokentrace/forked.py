"""One call run in a forked child process, its result (or error) sent back pickled.

Used where a second core can take work that shares this process's memory as it is: a rank's
merge written while this process loads it (:mod:`tokentrace.fleet.streamed`), half of a loaded
rank's queries run on a copy of its engine. The child may send one line before its result
(``notify``), e.g. the path of the file it writes. A context manager: when the body raises (an
error or a signal), the child is killed and reaped before the exception leaves the block.

Forking is safe only with no other thread alive (a lock held there stays held in the child):
:func:`can_fork` says so, and callers fall back to doing the work in this process.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import select
import signal
import threading
import time
from collections.abc import Callable

from tokentrace.errors import InputError, TokentraceError, detached
from tokentrace.journal import signals_held


def can_fork() -> bool:
    """Whether a child can be forked safely: ``fork`` exists and no other thread is alive."""
    return hasattr(os, "fork") and threading.active_count() == 1


@contextlib.contextmanager
def frozen_for_fork():
    """Forks inside the block give children whose inherited objects the cyclic collector skips
    (``gc.freeze``): a full pass in a child walked all of them (~10^5 after pandas' import),
    copying every page they lie on. This process gets them back at the end, unless they were
    frozen before (by :func:`tokentrace.report.analyze`, which gives them back itself)."""
    frozen_before, parent = gc.get_freeze_count() > 0, os.getpid()
    gc.freeze()
    try:
        yield
    finally:
        if not frozen_before and os.getpid() == parent:  # a child leaving the block keeps them
            gc.unfreeze()


class ForkedCall:
    """Runs ``work(notify)`` in a forked child; ``notify(text)`` sends one line to this process.

    Usage: ``with ForkedCall(work, what) as child: ...; value = child.result()``.

    Args:
        work: the call; its return value must pickle.
        what: names the work in the error raised when the child dies without a result.
    """

    def __init__(self, work: Callable[[Callable[[str], None]], object], what: str) -> None:
        self._work, self._what = work, what
        self._pid: int | None = None
        self._pipe: int | None = None
        self._buffer = b""
        self._line: str | None = None
        self._payload: bytes | None = None  # set once the child closed its end

    def __enter__(self) -> ForkedCall:
        read_end, write_end = os.pipe()
        parent = os.getpid()
        with signals_held(), frozen_for_fork():  # a signal inside fork's hooks would be swallowed
            pid = os.fork()
            if pid:
                self._pid, self._pipe = pid, read_end
                os.close(write_end)
                return self
        _run_child(self._work, read_end, write_end, parent)  # never returns
        raise AssertionError("unreachable")  # pragma: no cover

    def __exit__(self, *exc) -> None:
        if self._pid is not None:  # still running: the body raised (an error or a signal)
            _stop(self._pid)
            self._pid = None
        if self._pipe is not None:
            with contextlib.suppress(OSError):
                os.close(self._pipe)
            self._pipe = None

    def line(self) -> str | None:
        """The child's early line, waiting for it; None when it finished without sending one."""
        while self._line is None and self._payload is None:
            self._read(None)
        return self._line or None

    def finished(self, timeout: float) -> bool:
        """Whether the child has sent its result, waiting up to ``timeout`` seconds for it."""
        if self._payload is None:
            self._read(timeout)
        return self._payload is not None

    def result(self) -> object:
        """The child's return value, waiting for it; re-raises the child's exception."""
        while self._payload is None:
            self._read(None)
        status = reap(self._pid) if self._pid is not None else 0
        self._pid = None
        if not self._payload:
            raise _died(self._what, status)
        value, error = pickle.loads(self._payload)
        if error is not None:
            raise error
        return value

    def _read(self, timeout: float | None) -> None:
        """Reads what the pipe holds, waiting up to ``timeout`` (None: until something comes)."""
        if timeout is not None and not select.select([self._pipe], [], [], timeout)[0]:
            return
        piece = os.read(self._pipe, 1 << 16)
        if not piece:  # the child closed its end: everything after the line is the result
            self._payload, self._buffer = self._buffer, b""
            return
        self._buffer += piece
        if self._line is None and b"\n" in self._buffer:
            text, self._buffer = self._buffer.split(b"\n", 1)
            self._line = text.decode("utf-8")


def _run_child(work, read_end: int, write_end: int, parent: int) -> None:
    status = 1
    try:  # the child: never returns into the caller's code
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        os.close(read_end)
        writer = os.fdopen(write_end, "wb")
        sent = []

        def notify(text: str) -> None:
            if not sent and os.getppid() == parent:
                writer.write(text.replace("\n", " ").encode("utf-8") + b"\n")
                writer.flush()
                sent.append(text)

        try:
            found, error = work(notify), None
        except TokentraceError as exc:
            found, error = None, detached(exc)
        except Exception as exc:  # noqa: BLE001 - sent to the parent, raised there
            found, error = None, exc
        if not sent:  # the result must not be read as the line
            writer.write(b"\n")
        try:
            payload = pickle.dumps((found, error))
        except Exception:  # noqa: BLE001 - an unpicklable result or error: send its text
            payload = pickle.dumps((None, RuntimeError(f"{error!r}")))
        writer.write(payload)
        writer.close()
        status = 0
    finally:
        os._exit(status)


#: How long a child told to stop (SIGTERM: it removes its temp files, stops its own children)
#: has before it is killed.
STOP_GRACE_SECONDS = 5.0


def _stop(pid: int) -> None:
    """Ends the child: SIGTERM, then SIGKILL when it is still there after the grace time."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        time.sleep(0.01)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    reap(pid)


def reap(pid: int) -> int:
    """Waits for the child; its wait status (0 when already reaped)."""
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return 0


def how_it_ended(status: int) -> str:
    """A child's wait status in words: ``was killed by SIGKILL``, ``exited with status 1``."""
    if os.WIFSIGNALED(status):
        return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with status {os.WEXITSTATUS(status)}"


def _died(what: str, status: int) -> InputError:
    return InputError(f"{what}: the process doing it {how_it_ended(status)} without a result "
                      "(out of memory?); run again")
