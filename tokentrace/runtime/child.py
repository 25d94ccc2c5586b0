"""The program ``tokentrace record`` starts: the process is replaced by it (:func:`become`), and
inside it a termination signal ends the program through its ``finally`` blocks
(:func:`terminations_exit`), so that the recording's files are written.

Why replace the process rather than start a child and wait: the program then is the process the
user started, with its pid, its terminal, its signals (Ctrl-C, a SIGTERM from a job manager
reach it, not a parent that would have to forward them) and its exit status, which needs no
forwarding: the shell sees the program's own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import NoReturn

#: The signals that end a recorded program as an exit (Ctrl-C stays ``KeyboardInterrupt``).
TERMINATIONS = (signal.SIGTERM, signal.SIGHUP)


def become(argv: Sequence[str], env: dict[str, str]) -> NoReturn:
    """Replaces this process by ``argv`` (found on ``PATH``) with the environment ``env``.

    Raises:
        OSError: the program cannot be run (``FileNotFoundError``: no such program).
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    # What a program inherits across exec and Python changed for itself: the signals it ignores
    # (SIGPIPE, SIGXFSZ; subprocess's restore_signals does the same) and a blocked mask.
    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT, *TERMINATIONS))
    os.execvpe(argv[0], list(argv), env)


@contextlib.contextmanager
def terminations_exit() -> Iterator[None]:
    """Inside the block SIGTERM and SIGHUP raise ``SystemExit(128 + signal)`` in the main thread
    (as a shell reports a signal's end), so the ``finally`` blocks around the program run; a
    signal the program handles itself (a handler it installs inside) stays its own. Outside the
    main thread, or for a signal already ignored, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    installed = {s: signal.getsignal(s) for s in TERMINATIONS if signal.getsignal(s) is signal.SIG_DFL}
    for signum in installed:
        signal.signal(signum, _exit_on)
    try:
        yield
    finally:
        for signum, previous in installed.items():
            if signal.getsignal(signum) is _exit_on:
                signal.signal(signum, previous)


def _exit_on(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
