"""The lifecycle of one command: its boundary (:func:`command`: signals become exceptions, all
its writes undone when it fails) and the end of the process once it returned
(:func:`end_process`, without the interpreter's teardown)."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

from tokentrace.runtime.journal import Journal, journal
from tokentrace.runtime.signals import (
    Terminated,
    held_from_start,
    held_until_exit,
    late_signal,
    release_start_hold,
    signals_raise,
)

_process_ends_with_command: list[bool] = []


def process_ends_with_command() -> None:
    """Says that this process ends when its command does (the console script): the signals are
    held until the command installs its handlers (a signal during the start then stops it as
    one inside it does), and again from the moment its outputs are put in place to the
    process's end, where one that comes still gives the exit status of a signal
    (:func:`end_process`) instead of being lost in the exit."""
    _process_ends_with_command.append(True)
    held_from_start()


@contextlib.contextmanager
def command() -> Iterator[Journal]:
    """The boundary of one command: signals become exceptions and all its writes are undone
    when it fails (the journal it yields can track files written without
    :func:`~tokentrace.runtime.files.atomic_path`). A signal ends it with ``error: terminated by SIGTERM`` (or ``interrupted``)
    and exit status 128 + the signal.
    """
    with signals_raise():
        try:
            release_start_hold()
            with journal() as written:
                yield written
                if _process_ends_with_command:
                    held_until_exit()
        except Terminated as exc:
            print(f"error: {exc}; the outputs were left as they were", file=sys.stderr)
            raise SystemExit(exc.exit_code) from None
        except KeyboardInterrupt:
            print("error: interrupted; the outputs were left as they were", file=sys.stderr)
            raise SystemExit(128 + signal.SIGINT) from None


def end_process(code: object) -> None:
    """Ends the process with exit status ``code`` once the command has returned, without the
    interpreter's teardown.

    Every output is closed and in place by then (the commands write through
    :mod:`tokentrace.runtime.files`), so what the teardown does is free the objects pandas, pyarrow
    and the engine's modules made (10^5 objects and more, each freed in turn, with
    the result already written). The exit functions still run and the standard streams are
    flushed. A signal that came after the command's outputs were put in place
    (:func:`process_ends_with_command`) gives its status, 128 + the signal, and one line. A
    status that is not a number (a message to print), or another thread still running (which
    the interpreter would wait for), takes the usual exit.
    """
    late = late_signal()
    if late is not None and not code:
        what = "interrupted" if late == signal.SIGINT else f"terminated by {signal.Signals(late).name}"
        print(f"error: {what} after the outputs were written; they are complete", file=sys.stderr)
        code = 128 + late
    if not (code is None or isinstance(code, int)) or _other_threads():
        raise SystemExit(code)
    atexit._run_exitfuncs()
    for stream in dict.fromkeys((sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)):
        if stream is None:
            continue
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(code or 0)


def _other_threads() -> bool:
    """True when a non-daemon thread other than this one is alive."""
    current = threading.current_thread()
    return any(t is not current and not t.daemon and t.is_alive() for t in threading.enumerate())
