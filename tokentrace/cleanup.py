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
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

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


@dataclass
class Stop:
    """Why :func:`signals_deferred` stopped its block: the signal received, or the time limit."""

    signum: int = 0
    timed_out: bool = False

    def __bool__(self) -> bool:
        return bool(self.signum or self.timed_out)

    def __str__(self) -> str:
        if self.signum:
            return f"interrupted by {signal.Signals(self.signum).name}"
        return "stopped at its time limit" if self.timed_out else "not stopped"


@contextlib.contextmanager
def signals_deferred(interrupt: Callable[[], None],
                     timeout_s: float | None = None) -> Iterator[Stop]:
    """Runs a call into native code that a signal or a time limit must be able to stop, while
    no Python signal handler runs inside it.

    CPython runs signal handlers between bytecodes. Inside a WebAssembly call the main thread
    runs bytecodes only in the engine's imported functions (its clock, its reply callback): a
    handler raising there (``KeyboardInterrupt``, :class:`Terminated`) unwinds through
    wasmtime's ctypes callback, which cannot pass it on ("Exception ignored on calling ctypes
    callback function") and left the process to crash; and a query that calls no import gave
    the handler no chance to run at all. So inside the block SIGINT, SIGTERM and SIGHUP only
    note themselves, and CPython's own C handler writes the signal's number to a wakeup pipe
    that a watcher thread reads at once: it calls ``interrupt()`` (for the embedded engine,
    wasmtime's epoch increment, which traps the running code at its next loop or call). With
    ``timeout_s`` the watcher calls it when the time is up. Leaving the block, the noted signal
    goes to the handler that was there before, in plain Python: the usual exception (or the
    default action) follows. The yielded :class:`Stop` says what stopped the block, if anything.

    Outside the main thread no handler can be changed: only the time limit applies there.
    """
    stop = Stop()
    main = threading.current_thread() is threading.main_thread()
    if not main and timeout_s is None:
        yield stop
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous: dict[int, object] = {}
    old_wakeup = -1
    try:
        if main:
            old_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
            for signum in (*SIGNALS, signal.SIGINT):
                handler = signal.getsignal(signum)
                if handler is not signal.SIG_IGN:
                    previous[signum] = handler
                    signal.signal(signum, lambda number, _frame: stop.signum or setattr(
                        stop, "signum", number))
        watcher = threading.Thread(target=_watch, args=(read_fd, timeout_s, interrupt, stop),
                                   name="tokentrace-interrupt", daemon=True)
        watcher.start()
        try:
            yield stop
        finally:
            with contextlib.suppress(BlockingIOError):
                os.write(write_fd, b"\0")  # 0 is no signal's number: the watcher's end
            watcher.join()
    finally:
        if main:
            signal.set_wakeup_fd(old_wakeup)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        os.close(read_fd)
        os.close(write_fd)
    if stop.signum in previous:
        _deliver(stop.signum, previous[stop.signum], old_wakeup)


def _watch(read_fd: int, timeout_s: float | None, interrupt: Callable[[], None],
           stop: Stop) -> None:
    """The watcher of :func:`signals_deferred`: waits for a signal's byte, the end byte or the
    time limit."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([read_fd], [], [], wait)
        if not ready:
            stop.timed_out = True
            interrupt()
            return
        data = os.read(read_fd, 64)
        signals = [number for number in data if number]
        if signals:
            stop.signum = stop.signum or signals[0]
            interrupt()
        if 0 in data or signals:
            return


def _deliver(signum: int, handler, wakeup_fd: int) -> None:
    """Hands a signal noted by :func:`signals_deferred` to the handler it was kept from."""
    if wakeup_fd >= 0:  # an event loop that learns of signals through its wakeup pipe
        with contextlib.suppress(OSError):
            os.write(wakeup_fd, bytes([signum]))
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)


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
