"""Signals: the one set that stops a command, and how each kind of block receives them.

Each command runs inside :func:`tokentrace.runtime.command.command`, under
:func:`signals_raise`: SIGTERM and SIGHUP become a :class:`Terminated` exception in the main
thread (SIGINT stays ``KeyboardInterrupt``), so an interrupted command unwinds exactly like a
failed one: every ``with`` block closes, temp files go
(:func:`tokentrace.runtime.files.atomic_path`), the forked host copy is stopped
(:class:`tokentrace.merge.host_copy.HostCopy`), worker processes are ended
(:func:`tokentrace.runtime.processes.end_pool`) and the command's
:func:`~tokentrace.runtime.journal.journal` undoes what it wrote, so a command either completes
or leaves its outputs as they were. Only the first signal is acted on; the ones after it wait
for the cleanup. Exit status: 1 for an error, 128 + the signal for a signal (130 for SIGINT, 143
for SIGTERM, 129 for SIGHUP).

:func:`signals_held` keeps them back for the few steps that must not be cut in two (a file
created or moved and its record, a fork); :func:`signals_deferred` lets a call into native code
be stopped by them.
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

#: The signals that stop a command (SIGINT as ``KeyboardInterrupt``, the others as
#: :class:`Terminated`).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
_received: list[int] = []
_held: list[bool] = []  # one entry per open signals_held block of the main thread
_deferred: list[int] = []  # a signal that came inside those blocks, acted on at their end
_until_exit: list[bool] = []  # held_until_exit was called: nothing lets the signals through again
_from_start: list[object] = []  # held_from_start's mask to restore, until a command lets them through


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Holds SIGINT, SIGTERM and SIGHUP back for a few steps that must not be cut in two (a
    file created or moved and its record, a fork and its child's pid), and acts on the first
    one that came at the block's end. Main thread only.

    The mask holds them in this thread only: the kernel gives a signal for the process to any
    thread that does not block it (a native library's worker), and CPython then runs the
    handler in the main thread at its next bytecode check, inside the block. So the handler
    only notes a signal while a block is open (:func:`_on_signal`)."""
    if not _can_hold():
        yield
        return
    previous = _hold()
    try:
        yield
    finally:
        _let_through(previous)


def _can_hold() -> bool:
    """Whether this thread can hold the signals (the main thread, on a system with masks)."""
    return hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()


def _hold() -> object:
    """Blocks the stop signals in this thread and opens a hold (:func:`_on_signal` then notes
    one that another thread takes); returns the mask to restore."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    _held.append(True)
    return previous


def _let_through(previous: object) -> None:
    """Closes a hold of :func:`_hold`: restores ``previous`` and, when no hold is left open,
    acts on the first signal noted meanwhile."""
    _held.pop()
    deferred = [] if _held else _deferred[:1]
    if not _held:
        _deferred.clear()
    signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # a signal kept pending acts here
    if deferred:  # to the handler there now, as a signal noted by signals_deferred goes
        _deliver(deferred[0], signal.getsignal(deferred[0]), -1)


def unhold_signals() -> None:
    """In a child forked under :func:`signals_held`: lets the signals through again (a signal
    the parent noted is the parent's)."""
    _held.clear()
    _deferred.clear()
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(STOP_SIGNALS))


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
    if _held:  # taken by another thread inside signals_held: acted on at the block's end
        _deferred[:] = _deferred[:1] or [signum]
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
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    installed = [s for s in STOP_SIGNALS if previous[s] is not signal.SIG_IGN]  # nohup's SIGHUP stays ignored
    for signum in installed:
        signal.signal(signum, _on_signal)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _swallowed_signal_again(previous_hook)
    try:
        yield
    finally:
        if not _until_exit:
            for signum in installed:
                signal.signal(signum, previous[signum])
            _received.clear()
            sys.unraisablehook = previous_hook


def _swallowed_signal_again(previous: Callable) -> Callable:
    """An unraisable-exception hook that sends a signal again when its exception was swallowed.

    The handler raises wherever the main thread runs Python next, and that can be code whose
    exceptions CPython only reports: a weakref callback (importlib's module locks), a ctypes
    callback (wasmtime's finalizers), a ``__del__``. The signal was then lost: the command ran
    to its end and exited 0 ("Exception ignored ... Terminated"). The hook lets the handler act
    again and has a thread send the signal once more, a moment later, when the main thread is
    back in ordinary code."""
    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, (Terminated, KeyboardInterrupt)) and _received:
            signum = _received.pop()
            threading.Thread(target=_send_again, args=(signum,), name="tokentrace-signal-again",
                             daemon=True).start()
            return
        previous(unraisable)
    return hook


def _send_again(signum: int) -> None:
    time.sleep(0.001)
    os.kill(os.getpid(), signum)


def held_from_start() -> None:
    """Holds SIGINT, SIGTERM and SIGHUP back from the console script's start until its command
    installs its handlers (:func:`release_start_hold`, inside the command's clean-up): a signal
    that comes meanwhile (imports, argument parsing) then ends the command as one that comes
    inside it does, instead of the default action (SIGTERM: killed, no message) or a traceback
    (SIGINT). A command that never starts (help, ``cache``) reports it at the exit
    (:func:`late_signal`). Main thread only."""
    if not _from_start and _can_hold():
        _from_start.append(_hold())


def release_start_hold() -> None:
    """Ends :func:`held_from_start`'s hold, inside a command whose handlers are installed: a
    signal that came during the start acts here."""
    if _from_start:
        _let_through(_from_start.pop())


def held_until_exit() -> None:
    """Holds SIGINT, SIGTERM and SIGHUP back from here to the end of the process, whose work is
    done: its outputs are being put in place. One that comes is not acted on but reported by
    :func:`late_signal`, so that the process still ends with its status. Main thread only."""
    if _can_hold():
        _hold()  # never let through: the process ends
        _until_exit.append(True)


def late_signal() -> int | None:
    """The first stop signal that came after :func:`held_until_exit`, or during a
    :func:`held_from_start` that no command ended, if any: noted by the handler (a handler
    CPython still owed runs as this function's code does), or pending under the mask."""
    if not (_until_exit or _from_start):
        return None
    pending = sorted(signal.sigpending() & set(STOP_SIGNALS)) if hasattr(signal, "sigpending") else []
    return (_deferred or pending or [None])[0]


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
    default action) follows, even where the block raised (the trap of the call it stopped). The
    yielded :class:`Stop` says what stopped the block, if anything.

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
            for signum in STOP_SIGNALS:
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
        # Also when the block raised (the call the signal stopped traps, and the trap is
        # raised): the signal's exception then takes the place of the trap's.
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


@contextlib.contextmanager
def sigint_caught() -> Iterator[None]:
    """SIGINT raises ``KeyboardInterrupt`` inside the block even where the parent started this
    process with SIGINT ignored (a background job of a script: ``kill -INT`` is then the way to
    stop it)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def children_spared_sigint() -> Iterator[None]:
    """Threads started inside the block, and the processes they start (a local Dask cluster's
    event loop and its worker processes), keep SIGINT blocked for life: a terminal's Ctrl+C goes
    to the whole process group, and a worker that took it would print its own
    ``KeyboardInterrupt`` traceback while this process is already stopping it. This process
    stops them (SIGTERM) on its way out. A SIGINT that comes inside the block waits, pending,
    and acts at its end. Main thread only; the mask survives ``fork`` and ``exec``.

    multiprocessing's resource tracker is started first: starting it unblocks SIGINT in the
    calling thread, which would undo the mask for every process started after it."""
    if not _can_hold():
        yield
        return
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
