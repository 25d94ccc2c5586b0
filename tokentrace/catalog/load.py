"""Opening a trace with the bundled PerfettoSQL modules registered: the engine as the queries
need it. Everything above the catalogue opens traces through here.

The engine registers only the SQL packages it is given; this is where the catalogue gives it
its own (``queries/tokentrace/*.sql`` as package ``tokentrace``).
"""

from __future__ import annotations

import os

from tokentrace.catalog.headers import SQL_PACKAGE, bundled_dir, module_sources
from tokentrace.engine import Engine, SqlPackage, open_engine
from tokentrace.engine.base import GrowingFile
from tokentrace.options import EngineOptions


def bundled_package() -> SqlPackage:
    """The bundled ``tokentrace`` PerfettoSQL package, read from disk now (cheap: a few small
    files, and an edited module is picked up by the next trace opened)."""
    return SqlPackage(SQL_PACKAGE, module_sources(), root=bundled_dir() / SQL_PACKAGE)


def open_trace(path: str | os.PathLike | None, options: EngineOptions | None = None, *,
               warn: bool = True, growing: GrowingFile | None = None,
               input_bytes: int | None = None) -> Engine:
    """Loads ``path`` into the engine ``options`` names, with the ``tokentrace.*`` SQL modules.

    Args:
        path: the trace file (None: a remote server's own trace).
        options: which trace processor (default: the embedded one).
        warn: emit a :class:`~tokentrace.errors.TokentraceWarning` for Perfetto's load errors.
        growing, input_bytes: a file still being written (see :func:`tokentrace.engine.open_trace`).

    Raises:
        InputError, EngineError: see :func:`tokentrace.engine.open_trace`.
    """
    return open_engine(path, options or EngineOptions(), warn=warn,
                       sql_packages=[bundled_package()], growing=growing, input_bytes=input_bytes)
