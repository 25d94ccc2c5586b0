"""The default backend: Perfetto's trace processor as WebAssembly, run in-process by wasmtime.

Startup follows the emscripten runtime: ``emscripten_stack_init``, ``__wasm_call_ctors``, then a
host function of type ``(ptr, size) -> ()`` is put in the module's function table and its index
given to ``trace_processor_rpc_init``, which returns a request buffer. A request is written into
that buffer and ``trace_processor_on_rpc_request(size)`` called; every reply arrives, during that
call, through the host function. Everything is synchronous, so a missing reply is an error at
once, never a wait.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import wasmtime

from tokentrace.engine.base import Engine, feed_trace
from tokentrace.engine.packages import SqlPackage, register_packages
from tokentrace.engine.rpc import ReplyBuffer, RpcClient
from tokentrace.engine.wasm_host import HostState, define_imports
from tokentrace.engine.wasm_module import find_wasm, load_module
from tokentrace.errors import EngineError

REQUEST_BUFFER = 32 * 1024 * 1024  # the size the Perfetto UI uses
NATIVE_HINT = ("for very large traces use a native trace_processor_shell: "
               "--engine native --shell PATH")


class WasmTransport:
    """The ``send``/``read``/``close`` transport of :class:`~tokentrace.engine.rpc.RpcClient`."""

    def __init__(self, wasm_path: str | os.PathLike | None = None):
        self.wasm_path = find_wasm(wasm_path)
        config = wasmtime.Config()
        self._engine = wasmtime.Engine(config)
        self.module, self.from_cache = load_module(self._engine, self.wasm_path)
        self.store = wasmtime.Store(self._engine)
        self.state = HostState(self.store)
        self._replies = ReplyBuffer()
        self.broken: str | None = None
        try:
            self._instantiate()
        except (wasmtime.Trap, wasmtime.WasmtimeError, RuntimeError) as exc:
            raise EngineError(f"could not start: {self.explain(exc)}") from None

    def _instantiate(self) -> None:
        linker = wasmtime.Linker(self._engine)
        define_imports(linker, self.module, self.state)
        instance = linker.instantiate(self.store, self.module)
        exports = instance.exports(self.store)
        self.state.memory = exports["memory"]
        self._on_request = exports["trace_processor_on_rpc_request"]
        exports["emscripten_stack_init"](self.store)
        exports["__wasm_call_ctors"](self.store)
        reply_type = wasmtime.FuncType([wasmtime.ValType.i32(), wasmtime.ValType.i32()], [])
        reply_fn = wasmtime.Func(self.store, reply_type, self._on_reply)
        table = exports["__indirect_function_table"]
        index = table.grow(self.store, 1, reply_fn)
        self._request_ptr = exports["trace_processor_rpc_init"](self.store, index, REQUEST_BUFFER)

    def _on_reply(self, ptr: int, size: int) -> None:
        self._replies.append(self.state.read(ptr, size))

    # -- transport interface ---------------------------------------------------------------
    def send(self, data: bytes) -> None:
        """Passes request bytes to the module (split to fit its request buffer)."""
        if self.broken:
            raise EngineError(f"the embedded trace processor stopped earlier: {self.broken}")
        view = memoryview(data)
        for start in range(0, len(view), REQUEST_BUFFER):
            piece = view[start:start + REQUEST_BUFFER]
            self.state.write(self._request_ptr, bytes(piece))
            self._call_module(len(piece))

    def _call_module(self, size: int) -> None:
        try:
            self._on_request(self.store, size)
        except (wasmtime.Trap, wasmtime.WasmtimeError, RuntimeError) as exc:
            self.broken = self.explain(exc)
            raise EngineError(self.broken) from None

    def read(self, size: int) -> bytes:
        """Returns the next ``size`` reply bytes; a missing reply raises at once."""
        if size > self._replies.available():
            detail = self.state.stderr_tail()
            raise EngineError("the embedded trace processor sent no reply"
                              + (f" ({detail})" if detail else ""))
        return self._replies.take(size)

    def drain(self) -> bytes:
        """Every reply byte not read yet, for relays that forward the stream as it is (the
        test suite's stand-in for a trace processor server)."""
        return self._replies.take(self._replies.available())

    def close(self) -> None:
        """Drops the instance and its memory (up to 4 GiB) now, not at garbage collection."""
        self.state.memory = None
        self._on_request = None
        self._replies.clear()
        self.store = None
        self.state.store = None
        self.broken = self.broken or "closed"

    # -- diagnostics -----------------------------------------------------------------------
    def explain(self, exc: BaseException) -> str:
        """Turns a trap into a sentence: what happened and what to try."""
        printed = self.state.stderr_tail()
        tail = f"; trace processor said: {printed}" if printed else ""
        if self.state.heap_exhausted:
            return ("the embedded trace processor ran out of memory (the 4 GiB WebAssembly "
                    f"ceiling){tail}; {NATIVE_HINT}")
        what = self.state.fatal or str(exc).strip().splitlines()[0]
        return (f"the embedded trace processor crashed ({what}){tail}; if the trace loads in "
                f"ui.perfetto.dev this is a bug to report, otherwise {NATIVE_HINT}")


def start_embedded(trace: Path, wasm_path: str | os.PathLike | None = None,
                   packages: Sequence[SqlPackage] = ()) -> Engine:
    """Starts an in-process trace processor, loads ``trace``, registers ``packages``.

    Raises:
        EngineError: the module cannot start, the trace cannot be loaded, or Perfetto refuses
            a package.
    """
    transport = WasmTransport(wasm_path)
    client = RpcClient(transport)
    engine = Engine(client, "embedded", f"wasm {transport.wasm_path}", trace)
    try:
        engine.load = feed_trace(client, trace)
        register_packages(client, packages, "the embedded trace processor")
    except BaseException:
        engine.close()
        raise
    return engine
