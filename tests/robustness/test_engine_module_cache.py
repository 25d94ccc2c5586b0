"""Issue 31: a compiled engine module taken from the cache is native code run in-process. A
planted or damaged ``.cwasm`` must not break every command nor be run: its digest must match
the one recorded when it was compiled, and a cache folder others can write is not read."""

from __future__ import annotations

import os

import pytest

from tokentrace.engine import wasm_module
from tokentrace.engine.wasm_module import find_wasm, load_module, new_engine

# Each test compiles the engine's WebAssembly module from scratch (tens of seconds): out of the
# quick run (tests/conftest.py).
pytestmark = pytest.mark.slow


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "wasm"
    monkeypatch.setattr(wasm_module, "cache_dir", lambda: folder)
    return folder


def _cwasm(folder):
    found = sorted(folder.glob("*.cwasm"))
    assert len(found) == 1, found
    return found[0]


def test_a_planted_module_is_not_loaded(cache):
    engine, wasm = new_engine(), find_wasm()
    _, cached = load_module(engine, wasm)
    assert not cached
    _, cached = load_module(engine, wasm)
    assert cached  # the module this process compiled, checked, is reused
    target = _cwasm(cache)
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte of native code changed
    target.write_bytes(bytes(data))
    module, cached = load_module(engine, wasm)
    assert not cached and module is not None
    assert target.read_bytes() != bytes(data)  # compiled again and replaced


def test_a_cache_folder_others_can_write_is_not_read(cache):
    engine, wasm = new_engine(), find_wasm()
    load_module(engine, wasm)
    os.chmod(cache, 0o777)
    _, cached = load_module(engine, wasm)
    assert not cached
    os.chmod(cache, 0o700)
    os.chmod(_cwasm(cache), 0o666)
    _, cached = load_module(engine, wasm)
    assert not cached
