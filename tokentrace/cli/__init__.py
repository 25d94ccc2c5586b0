"""Command line: one module per command, each a thin layer over one library call."""

import os

from tokentrace.cli import (
    analyze,  # noqa: F401  (registers the command)
    merge,  # noqa: F401  (registers the command)
    query,  # noqa: F401  (registers query and queries)
)
from tokentrace.cli.app import app


def main() -> None:
    """Entry point of the ``tokentrace`` console script."""
    # No command does linear algebra; OpenBLAS would start a thread per core when numpy is
    # imported (by pandas), which spins at first: ~0.1 CPU-s of an analyze on 2 cores, and
    # every process forked later holds a copy of its idle state. Numpy is not imported yet.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    app()
