"""Opening a trace with the bundled PerfettoSQL modules registered: the engine as the queries
need it. Everything above the catalogue opens traces through here.

The engine registers only the SQL packages it is given; this is where the catalogue gives it
its own (``queries/tokentrace/**/*.sql`` as package ``tokentrace``: the file
``queries/tokentrace/queries/gpu_gaps.sql`` is the module ``tokentrace.queries.gpu_gaps``).
"""

from __future__ import annotations

import os

from tokentrace.catalog.headers import SQL_PACKAGE, bundled_dir, module_sources
from tokentrace.engine import Engine, GrowingTrace, SqlPackage, open_engine
from tokentrace.options import EngineOptions


def bundled_package() -> SqlPackage:
    """The bundled ``tokentrace`` PerfettoSQL package, read from disk now (cheap: a few small
    files, and an edited module is picked up by the next trace opened)."""
    return SqlPackage(SQL_PACKAGE, module_sources(), root=bundled_dir() / SQL_PACKAGE)


def open_trace(source: str | os.PathLike | GrowingTrace | None,
               options: EngineOptions | None = None, *, warn: bool = True) -> Engine:
    """Loads ``source`` into the engine ``options`` names, with the ``tokentrace.*`` SQL modules:
    the one way above the engine to open a trace.

    Args:
        source: the trace file, or a :class:`~tokentrace.engine.GrowingTrace` (one still being
            written); None: a remote server's own trace.
        options: which trace processor (default: the embedded one).
        warn: emit a :class:`~tokentrace.errors.TokentraceWarning` for Perfetto's load errors.

    Raises:
        InputError, EngineError: see :func:`tokentrace.engine.open_engine`.
    """
    return open_engine(source, options, warn=warn, sql_packages=[bundled_package()])
