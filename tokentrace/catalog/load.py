"""Opening a trace with the bundled PerfettoSQL modules registered: the engine as the queries
need it. Everything above the catalogue opens traces through here."""

from __future__ import annotations

import os

from tokentrace.engine import Engine, open_engine
from tokentrace.options import EngineOptions


def open_trace(path: str | os.PathLike | None, options: EngineOptions | None = None, *,
               warn: bool = True) -> Engine:
    """Loads ``path`` into the engine ``options`` names, with the ``tokentrace.*`` SQL modules.

    Args:
        path: the trace file (None: a remote server's own trace).
        options: which trace processor (default: the embedded one).
        warn: emit a :class:`~tokentrace.errors.TokentraceWarning` for Perfetto's load errors.

    Raises:
        InputError, EngineError: see :func:`tokentrace.engine.open_trace`.
    """
    return open_engine(path, options or EngineOptions(), warn=warn)
