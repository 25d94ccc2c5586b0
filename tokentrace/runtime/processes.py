"""Processes: forked calls, worker pools, how a child is stopped, the collector around forks.

* :class:`ForkedCall`: one call run in a forked child process, its result (or error) sent back
  pickled. Used where a second core can take work that shares this process's memory as it is:
  a rank's merge written while this process loads it (:mod:`tokentrace.fleet.execute`), half
  of a loaded rank's queries run on a copy of its engine. The child may send one line before
  its result (``notify``), e.g. the path of the file it writes.
  A context manager: when the body raises (an error or a signal), the child is stopped
  (:func:`stop_child`) and reaped before the exception leaves the block.
* :func:`fork_child`: the fork under both that and the merge's host copy
  (:mod:`tokentrace.merge.host_copy`).
* :func:`pool`: ``jobs`` worker processes (the merge's ranks, the query map of
  :mod:`tokentrace.fleet.runner`), ended at once on an error or a signal (:func:`end_pool`).
* One stop policy for a child: SIGTERM (it removes its temp files, stops its own children), then
  SIGKILL after :data:`STOP_GRACE_SECONDS`. A child whose parent dies gets that SIGTERM too
  (:func:`end_with_parent`), and a context manager that starts a child stops it again when a
  signal comes before its ``__enter__`` returns (:func:`stops_child_on_raise`).

Forking is safe only with no other thread alive (a lock held there stays held in the child):
:func:`can_fork` says so, and callers fall back to doing the work in this process.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import pickle
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from tokentrace.errors import InputError, TokentraceError, detached
from tokentrace.runtime.signals import STOP_SIGNALS, Terminated, _on_signal, _received, signals_held, unhold_signals


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


@contextlib.contextmanager
def collector_frozen() -> Iterator[None]:
    """The objects made before the block are left out of the cyclic collector's passes inside
    it (``gc.freeze``), in this process and every child forked meanwhile; at the end a caller's
    garbage made before the block is collected again."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pauses Python's cyclic garbage collector inside the block (its earlier state restored)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def fork_child(body: Callable[[int, int], None]) -> tuple[int, int]:
    """Forks a child that runs ``body(write_end, parent_pid)`` and ends (status 0 when ``body``
    returned, 1 when it raised), never returning into the caller's code. Returns the child's pid
    and the read end of its pipe. Call it under :func:`signals_held`: a signal inside fork's
    hooks would be swallowed, and one before the pid is stored would leave the child unknown."""
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid:
        os.close(write_end)
        return pid, read_end
    status = 1
    try:  # the child: never returns into the caller's code
        end_with_parent(parent)
        unhold_signals()
        os.close(read_end)
        body(write_end, parent)
        status = 0
    finally:
        os._exit(status)


def write_all(fd: int, data, parent: int) -> None:
    """In a forked child: writes ``data`` whole at ``fd``, ended at once (status 1) when ``parent``
    is gone (killed): it must not go on writing into its output."""
    exit_if_orphaned(parent)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def exit_if_orphaned(parent: int) -> None:
    """In a forked child: ends it at once (status 1) when ``parent`` is gone (killed)."""
    if os.getppid() != parent:
        os._exit(1)


_PR_SET_PDEATHSIG = 1


def end_with_parent(parent: int) -> None:
    """In a child just forked (signals still held): SIGTERM comes when its parent dies (Linux's
    ``PR_SET_PDEATHSIG``), and it ends at once when the parent is gone already. A parent killed
    outright (a pool worker past its grace time) cannot stop its child, which would otherwise
    go on writing into a cache entry or output the command's clean-up has just removed."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    exit_if_orphaned(parent)


def stops_child_on_raise(enter: Callable) -> Callable:
    """Decorates the ``__enter__`` of a context manager that forks a child under
    :func:`signals_held`: a signal held during the fork is raised as soon as they are let
    through, still inside ``__enter__``, and Python calls no ``__exit__`` for an ``__enter__``
    that raised. Here ``__exit__`` runs then (it stops the child), so no child outlives the
    block: one left running went on to write its file after the command's clean-up."""
    @functools.wraps(enter)
    def entered(self):
        try:
            return enter(self)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
    return entered


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

    @stops_child_on_raise
    def __enter__(self) -> ForkedCall:
        with signals_held(), frozen_for_fork():  # a signal inside fork's hooks would be swallowed
            self._pid, self._pipe = fork_child(lambda write_end, parent: _run_child(self._work, write_end, parent))
        return self

    def __exit__(self, *exc) -> None:
        if self._pid is not None:  # still running: the body raised (an error or a signal)
            stop_child(self._pid)
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


def _run_child(work, write_end: int, parent: int) -> None:
    """The child of a :class:`ForkedCall` (inside :func:`fork_child`)."""
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


#: How long a child told to stop (SIGTERM: it removes its temp files, stops its own children)
#: has before it is killed.
STOP_GRACE_SECONDS = 5.0


def stop_child(pid: int) -> None:
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


def kill_group(process) -> None:
    """Kills a ``subprocess.Popen`` started with ``start_new_session`` and its process group
    (SIGKILL; the process alone where there are no groups); one gone already is fine."""
    try:
        if hasattr(os, "killpg"):
            os.killpg(process.pid, signal.SIGKILL)
        else:  # Windows: no process groups to kill
            process.kill()
    except OSError:  # gone already
        pass


# --- worker pools ------------------------------------------------------------------------------

_in_task: list[bool] = []  # in a worker: a task is running


def _on_worker_signal(signum: int, frame) -> None:
    if not _in_task:  # idle: nothing to clean up, and no traceback from the pool's own loop
        os._exit(128 + signum)
    _on_signal(signum, frame)


def worker_init() -> None:
    """Initialiser of tokentrace's worker processes: a signal (from the parent that ends the
    pool, or the terminal) unwinds the running task (its temp files and host copy go), then
    :func:`run_in_worker` exits the process; an idle worker exits at once.

    The workers are forked under :func:`signals_held` (:meth:`Pool.submit`), whose mask a child
    inherits: without unholding it here, a worker kept every stop signal pending until its task
    was done, and the pool waited out its grace time before killing it."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _on_worker_signal)
    unhold_signals()
    _received.clear()


def run_in_worker(function, *args):
    """Runs ``function(*args)`` in a worker; a signal ends the worker once the task unwound. A
    :class:`~tokentrace.errors.TokentraceError` is raised :func:`~tokentrace.errors.detached`
    (it goes back to the parent pickled)."""
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


#: How long a pool's worker told to stop has before it is killed: longer than a forked call's
#: child, for a worker may be inside an engine call that only stops when it returns.
WORKER_GRACE_SECONDS = 10.0


def end_pool(executor, grace_s: float = WORKER_GRACE_SECONDS) -> None:
    """Ends a ``ProcessPoolExecutor`` at once, by the stop policy of :func:`stop_child`:
    pending tasks cancelled, each worker sent SIGTERM (it removes its temp files and stops its
    host copy), then SIGKILL after ``grace_s``."""
    # No public handle on either; shutdown forgets the manager thread, so it is taken first.
    processes = list((getattr(executor, "_processes", None) or {}).values())
    manager = getattr(executor, "_executor_manager_thread", None)
    executor.shutdown(wait=False, cancel_futures=True)
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
    # The pool's manager thread sees its workers gone and ends; wait for it, since a thread that
    # outlives the pool makes every later fork in this process unsafe (can_fork() is then false).
    if manager is not None and manager is not threading.current_thread():
        manager.join(max(1.0, deadline - time.monotonic()))


class Pool:
    """The worker processes of :func:`pool`."""

    def __init__(self, executor) -> None:
        self._executor = executor

    def submit(self, calls: Iterable[tuple]) -> list:
        """Submits each ``(function, *args)`` (run by :func:`run_in_worker`); its futures, in
        order. The workers are forked here, at the first: no signal inside fork's hooks."""
        with signals_held(), frozen_for_fork():
            return [self._executor.submit(run_in_worker, *call) for call in calls]

    @staticmethod
    def as_completed(futures: Iterable) -> Iterator:
        """The futures as they finish."""
        import concurrent.futures

        return concurrent.futures.as_completed(futures)


@contextlib.contextmanager
def pool(jobs: int, broken: str) -> Iterator[Pool]:
    """``jobs`` forked worker processes (:func:`worker_init`). When the block raises (an error
    in a task, or a signal here), the pool is ended at once (:func:`end_pool`): no worker
    outlives it; a worker that died (killed, out of memory) is an :class:`InputError` saying
    ``broken``. After a clean exit the pool is shut down, its workers waited for."""
    import concurrent.futures  # lazily: work done in this process needs no pool (nor its import)
    from concurrent.futures.process import BrokenProcessPool

    executor = concurrent.futures.ProcessPoolExecutor(max_workers=jobs, initializer=worker_init)
    try:
        yield Pool(executor)
    except BrokenProcessPool:
        end_pool(executor)
        raise InputError(broken) from None
    except BaseException:
        end_pool(executor)
        raise
    executor.shutdown()
