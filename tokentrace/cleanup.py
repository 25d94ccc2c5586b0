"""The one cleanup path for errors and signals.

Each command runs inside :func:`command`: SIGTERM and SIGHUP become a :class:`Terminated`
exception in the main thread (SIGINT stays ``KeyboardInterrupt``), so an interrupted command
unwinds exactly like a failed one: every ``with`` block closes, temp files go
(:func:`tokentrace.atomic.atomic_path`), the forked host copy is killed
(:class:`tokentrace.merge.host_copy.HostCopy`), worker processes are ended (:func:`end_pool`)
and the command's :func:`~tokentrace.journal.journal` undoes what it wrote, so a command either
completes or leaves its outputs as they were. Only the first signal is acted on; the ones after
it wait for the cleanup. Exit status: 1 for an error, 128 + the signal for a signal (130 for
SIGINT, 143 for SIGTERM, 129 for SIGHUP).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

from tokentrace.journal import Journal, journal

SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_received: list[int] = []


class Terminated(BaseException):
    """A SIGTERM or SIGHUP, raised where the main thread was (a BaseException, like
    ``KeyboardInterrupt``: no ``except Exception`` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def __str__(self) -> str:
        return f"terminated by {signal.Signals(self.signum).name}"


def _on_signal(signum: int, frame) -> None:
    if _received:  # the first one's cleanup is running: let it finish
        return
    _received.append(signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Makes SIGTERM, SIGHUP and SIGINT exceptions (the first one only) inside the block;
    the previous handlers come back after it. Outside the main thread it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wanted = (*SIGNALS, signal.SIGINT)
    previous = {s: signal.getsignal(s) for s in wanted}
    installed = [s for s in wanted if previous[s] is not signal.SIG_IGN]  # nohup's SIGHUP stays ignored
    for signum in installed:
        signal.signal(signum, _on_signal)
    try:
        yield
    finally:
        for signum in installed:
            signal.signal(signum, previous[signum])
        _received.clear()


@contextlib.contextmanager
def command() -> Iterator[Journal]:
    """The boundary of one command: signals become exceptions and all its writes are undone
    when it fails (the journal it yields can track files written without
    :func:`~tokentrace.atomic.atomic_path`). A signal ends it with ``error: terminated by SIGTERM`` (or ``interrupted``)
    and exit status 128 + the signal.
    """
    with signals_raise():
        try:
            with journal() as written:
                yield written
        except Terminated as exc:
            print(f"error: {exc}; the outputs were left as they were", file=sys.stderr)
            raise SystemExit(exc.exit_code) from None
        except KeyboardInterrupt:
            print("error: interrupted; the outputs were left as they were", file=sys.stderr)
            raise SystemExit(128 + signal.SIGINT) from None


_in_task: list[bool] = []  # in a worker: a task is running


def _on_worker_signal(signum: int, frame) -> None:
    if not _in_task:  # idle: nothing to clean up, and no traceback from the pool's own loop
        os._exit(128 + signum)
    _on_signal(signum, frame)


def worker_init() -> None:
    """Initialiser of tokentrace's worker processes: a signal (from the parent that ends the
    pool, or the terminal) unwinds the running task (its temp files and host copy go), then
    :func:`run_in_worker` exits the process; an idle worker exits at once."""
    for signum in (*SIGNALS, signal.SIGINT):
        signal.signal(signum, _on_worker_signal)
    _received.clear()


def run_in_worker(function, *args):
    """Runs ``function(*args)`` in a worker; a signal ends the worker once the task unwound. A
    :class:`~tokentrace.errors.TokentraceError` is raised :func:`~tokentrace.errors.detached`
    (it goes back to the parent pickled)."""
    from tokentrace.errors import TokentraceError, detached

    _in_task.append(True)
    try:
        return function(*args)
    except TokentraceError as exc:
        error = detached(exc)
    except (Terminated, KeyboardInterrupt) as exc:
        os._exit(getattr(exc, "exit_code", 128 + signal.SIGINT))
    finally:
        _in_task.clear()
    raise error  # outside the handler: with no context


def end_pool(pool, grace_s: float = 10.0) -> None:
    """Ends a ``ProcessPoolExecutor`` at once: pending tasks cancelled, each worker sent SIGTERM
    (it removes its temp files and kills its host copy), then SIGKILL after ``grace_s``."""
    processes = list(getattr(pool, "_processes", {}).values())  # no public handle on them
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if process.is_alive():
                os.kill(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in processes:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(1.0)
