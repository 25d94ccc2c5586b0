"""Command line: one module per command, each a thin layer over one library call."""

import os

from tokentrace.cli import (
    analyze,  # noqa: F401  (registers the command)
    cache,  # noqa: F401  (registers cache list|clear)
    diff,  # noqa: F401  (registers the command)
    merge,  # noqa: F401  (registers the command)
    query,  # noqa: F401  (registers query and queries)
    record,  # noqa: F401  (registers the command)
    view,  # noqa: F401  (registers the command)
)
from tokentrace.cli.app import app
from tokentrace.runtime.command import end_process, process_ends_with_command

#: What main() changed in the environment for tokentrace's own commands, with the values before
#: (None: unset): ``tokentrace record`` gives the user's program these back.
ENV_BEFORE: dict[str, str | None] = {}


def main() -> None:
    """Entry point of the ``tokentrace`` console script."""
    # No command does linear algebra; OpenBLAS would start a thread per core when numpy is
    # imported (by pandas), and those threads spin waiting for work at first, taking CPU from
    # the command's own processes; every process forked later holds a copy of their idle
    # state. Numpy is not imported yet.
    ENV_BEFORE["OPENBLAS_NUM_THREADS"] = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    process_ends_with_command()
    try:
        app()  # standalone: it always ends in SystemExit
    except SystemExit as exc:
        end_process(exc.code)
    end_process(0)
