"""Command line: one module per command, each a thin layer over one library call."""

from tokentrace.cli import (
    analyze,  # noqa: F401  (registers the command)
    merge,  # noqa: F401  (registers the command)
    query,  # noqa: F401  (registers query and queries)
)
from tokentrace.cli.app import app


def main() -> None:
    """Entry point of the ``tokentrace`` console script."""
    app()
