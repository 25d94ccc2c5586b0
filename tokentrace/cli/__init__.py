"""Command line: one module per command, each a thin layer over one library call."""

import atexit
import os
import sys
import threading

from tokentrace.cli import (
    analyze,  # noqa: F401  (registers the command)
    diff,  # noqa: F401  (registers the command)
    merge,  # noqa: F401  (registers the command)
    query,  # noqa: F401  (registers query and queries)
)
from tokentrace.cli.app import app


def main() -> None:
    """Entry point of the ``tokentrace`` console script."""
    # No command does linear algebra; OpenBLAS would start a thread per core when numpy is
    # imported (by pandas), and those threads spin waiting for work at first, taking CPU from
    # the command's own processes; every process forked later holds a copy of their idle
    # state. Numpy is not imported yet.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        app()  # standalone: it always ends in SystemExit
    except SystemExit as exc:
        end_process(exc.code)
    end_process(0)


def end_process(code: object) -> None:
    """Ends the process with exit status ``code`` once the command has returned, without the
    interpreter's teardown.

    Every output is closed and in place by then (the commands write through
    :mod:`tokentrace.atomic`), so what the teardown does is free the objects pandas, pyarrow,
    matplotlib and the engine's modules made (10^5 objects and more, each freed in turn, with
    the result already written). The exit functions still run and the standard streams are
    flushed. A status that is not a number (a message to print), or another thread still running
    (which the interpreter would wait for), takes the usual exit.
    """
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
