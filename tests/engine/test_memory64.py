"""The memory64 build (traces beyond wasm32's 4 GiB heap) and the choice between the builds.

No multi-GB file here: the heap ceilings are injected (:class:`HeapLimits`), so the out-of-memory
retry and the refusal before loading run on the committed samples in seconds.
"""

from __future__ import annotations

import gzip
import struct
import warnings

import pandas as pd
import pytest
import wasmtime

import tokentrace.engine.embedded as embedded
import tokentrace.engine.sizing as sizing
from support.paths import DATA
from tokentrace.catalog import run_query
from tokentrace.catalog.load import bundled_package
from tokentrace.engine import open_engine
from tokentrace.engine.embedded import start_embedded
from tokentrace.engine.sizing import HeapLimits, choose_builds, trace_input_bytes
from tokentrace.engine.wasm_host import HostState, _fd_write, _write_tm
from tokentrace.engine.wasm_module import (
    MEMORY64_TUNING,
    declares_memory64,
    find_wasm,
    is_memory64,
    load_module,
    new_engine,
)
from tokentrace.errors import EngineError, TokentraceWarning
from tokentrace.options import EngineOptions

MiB = 1024**2
VIZTRACER = DATA / "sample_t39_tp2" / "sample-TP0.viztracer.json.gz"
#: Bundled queries compared between the builds: counts, joins over the tokentrace modules, the
#: PerfettoSQL standard library (interval intersections) and stats.
COMPARED = ("trace_health", "kernel_summary", "gpu_gaps", "gpu_busy", "step_breakdown",
            "host_stalls")


@pytest.fixture(scope="module")
def memory64_engine(merged_t39):
    path, _ = merged_t39
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TokentraceWarning)
        engine = open_engine(path, EngineOptions(wasm_build="memory64"), sql_packages=[bundled_package()])
    yield engine
    engine.close()


def test_both_builds_ship_and_are_told_apart(tmp_path):
    for memory64 in (False, True):
        wasm = find_wasm(memory64=memory64)
        assert declares_memory64(wasm) is memory64, wasm.name
        tuning = MEMORY64_TUNING if memory64 else ""
        module, _ = load_module(new_engine(memory64), wasm, tuning)
        assert is_memory64(module) is memory64, wasm.name
    junk = tmp_path / "junk.wasm"
    junk.write_bytes(b"\0asm\x01\0\0\0\x05")  # a memory section cut short
    assert not declares_memory64(junk) and not declares_memory64(tmp_path / "missing.wasm")


def test_memory64_loads_the_merged_sample(merged_t39, memory64_engine):
    path, wasm32 = merged_t39
    assert memory64_engine.load.build == "memory64"
    assert "trace_processor_memory64.wasm" in memory64_engine.description
    assert wasm32.load.build == "wasm32"
    assert memory64_engine.load.bytes_fed == path.stat().st_size
    counts = ("SELECT (SELECT COUNT(*) FROM slice) AS slices, (SELECT COUNT(*) FROM flow) AS "
              "flows, (SELECT COUNT(*) FROM thread) AS threads, (SELECT SUM(dur) FROM slice) AS d")
    assert memory64_engine.query(counts).equals(wasm32.query(counts))
    assert memory64_engine.query(counts).slices[0] > 100_000
    assert memory64_engine.stats_problems().equals(wasm32.stats_problems())


@pytest.mark.parametrize("name", COMPARED)
def test_bundled_queries_equal_between_builds(merged_t39, memory64_engine, name):
    _, wasm32 = merged_t39
    expected = run_query(wasm32, name)
    got = run_query(memory64_engine, name)
    assert len(expected) > 0, name
    pd.testing.assert_frame_equal(got, expected)


def test_memory64_heap_grows_past_the_first_pages(memory64_engine):
    # The memory64 instance grows with emscripten_resize_heap like wasm32 (i64 size argument).
    assert memory64_engine.load.heap_bytes > 64 * MiB


def _load_quietly(trace, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TokentraceWarning)
        return start_embedded(trace, **kwargs)


@pytest.mark.slow
def test_wasm32_out_of_memory_is_retried_on_memory64(monkeypatch):
    # The estimate says wasm32 (ratio 0), wasm32's 80 MiB heap runs out: loaded again on memory64.
    monkeypatch.setattr(sizing, "HEAP_PER_INPUT_BYTE", 0.0)
    monkeypatch.setattr(sizing, "HEAP_BASE", 0)
    with _load_quietly(VIZTRACER, limits=HeapLimits(wasm32=80 * MiB)) as engine:
        assert engine.load.build == "memory64"
        assert "after the wasm32 build ran out of memory" in engine.description
        assert engine.query("SELECT COUNT(*) AS n FROM slice").n[0] > 100_000


@pytest.mark.slow
def test_explicit_build_out_of_memory_names_the_native_engine(monkeypatch):
    # A 100 MiB ceiling stands in for the 4 GiB / 16 GiB ones: the same code path, in a second.
    monkeypatch.setattr(sizing, "HEAP_PER_INPUT_BYTE", 0.0)
    monkeypatch.setattr(sizing, "HEAP_BASE", 0)
    limits = HeapLimits(wasm32=100 * MiB, memory64=100 * MiB)
    for build in ("wasm32", "memory64"):
        with pytest.raises(EngineError, match=rf"ran out of memory \(the {build} build's 0.0977 "
                                              r"GiB heap ceiling\).*--engine native --shell"):
            _load_quietly(VIZTRACER, build=build, limits=limits)
    # auto: wasm32, then memory64, which runs out too: its message is the one raised
    with pytest.raises(EngineError, match=r"ran out of memory \(the memory64 build's"):
        _load_quietly(VIZTRACER, limits=limits)


def test_too_large_is_refused_before_loading(monkeypatch):
    def no_start(*_args, **_kwargs):
        raise AssertionError("the trace processor was started for a trace that cannot fit")

    monkeypatch.setattr(embedded, "WasmTransport", no_start)
    need = sizing.estimated_heap(trace_input_bytes(VIZTRACER))
    small = HeapLimits(wasm32=need // 4, memory64=need // 2)
    for build in ("auto", "memory64"):
        with pytest.raises(EngineError) as caught:
            start_embedded(VIZTRACER, build=build, limits=small)
        message = str(caught.value)
        assert "\n" not in message
        assert "too large for the embedded trace processor" in message
        assert "the memory64 build can use here; use a native trace_processor_shell: " \
               "--engine native --shell PATH" in message
    with pytest.raises(EngineError, match=r"the wasm32 build can use here \(the memory64 build "
                                          r"may fit it.*--engine native"):
        start_embedded(VIZTRACER, build="wasm32", limits=small)


@pytest.mark.slow
def test_explicit_wasm_file_is_checked_against_its_own_build(monkeypatch):
    monkeypatch.setattr(sizing, "HEAP_BASE", 1024 * MiB)  # needs > 1 GiB: refused by wasm32's
    small = HeapLimits(wasm32=512 * MiB, memory64=4096 * MiB)
    with _load_quietly(VIZTRACER, wasm_path=find_wasm(memory64=True), limits=small) as engine:
        assert engine.load.build == "memory64"
    with pytest.raises(EngineError, match="too large.*wasm32 build.*--engine native"):
        start_embedded(VIZTRACER, wasm_path=find_wasm(), limits=small)


def test_unknown_build():
    with pytest.raises(EngineError, match="unknown WebAssembly build 'wasm128'"):
        open_engine(VIZTRACER, EngineOptions(wasm_build="wasm128"))


def test_auto_choice_by_estimated_heap():
    limits = HeapLimits(wasm32=4 * 1024**3, memory64=16 * 1024**3)
    assert choose_builds(10**8, limits) == [False, True]  # 100 MB: wasm32, memory64 if it OOMs
    assert choose_builds(int(1.3e9), limits) == [False, True]
    assert choose_builds(int(1.6e9), limits) == [True]  # near the 4 GiB heap: memory64 at once
    assert sizing.estimated_heap(int(1.6e9)) < limits.memory64


def test_input_size_of_gzip_is_the_inflated_one(tmp_path):
    body = b'{"traceEvents": []}' + b" " * 100_000
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(body))
    assert trace_input_bytes(packed) == len(body)
    plain = tmp_path / "t.json"
    plain.write_bytes(body)
    assert trace_input_bytes(plain) == len(body)
    assert trace_input_bytes(tmp_path / "missing.json") == 0  # loading says what is wrong


def test_default_limits_stay_within_the_machine():
    limits = HeapLimits.default()
    assert limits.wasm32 == 4 * 1024**3 - 65536
    assert 0 < limits.memory64 <= 16 * 1024**3
    memory = sizing.usable_memory()
    if memory is not None:
        assert limits.memory64 <= memory


def _memory(memory64: bool) -> tuple[wasmtime.Store, HostState]:
    store = wasmtime.Store(new_engine())
    state = HostState(store, memory64)
    state.memory = wasmtime.Memory(store, wasmtime.MemoryType(wasmtime.Limits(1, None),
                                                              is_64=memory64))
    return store, state


@pytest.mark.parametrize("memory64", [False, True], ids=["wasm32", "memory64"])
def test_fd_write_reads_iovecs_of_the_build(memory64):
    # The early prototype's hang: wasm32 iovecs (two u32) read in the memory64 build gave a
    # short count, and musl's stdio wrote the rest again, forever, at the first log line.
    _, state = _memory(memory64)
    state.write(1000, b"Loading trace 50.33 MB\n")
    state.write(2000, b"second\n")
    layout = "<QQ" if memory64 else "<II"
    state.write(100, struct.pack(layout, 1000, 23) + struct.pack(layout, 2000, 7))
    state.write(300, b"\xff" * 8)
    assert _fd_write(state, 2, 100, 2, 300) == 0
    written = state.read(300, 8)
    if memory64:
        assert struct.unpack("<Q", written)[0] == 30  # a size_t
    else:
        assert struct.unpack("<I", written[:4])[0] == 30 and written[4:] == b"\xff" * 4
    assert bytes(state.stderr) == b"Loading trace 50.33 MB\nsecond\n"


@pytest.mark.parametrize("memory64", [False, True], ids=["wasm32", "memory64"])
def test_struct_tm_layout_of_the_build(memory64):
    _, state = _memory(memory64)
    state.write(0, b"\xee" * 64)
    _write_tm(state, 86400 * 365, 0)  # 1971-01-01 00:00:00 UTC
    fields = struct.unpack("<9i", state.read(0, 36))
    assert fields == (0, 0, 0, 1, 0, 71, 5, 0, 0)
    gmtoff_at = 40 if memory64 else 36
    assert state.read(gmtoff_at, state.ptr_size) == b"\0" * state.ptr_size
    if memory64:
        assert state.read(36, 4) == b"\xee" * 4  # padding left alone


def test_wasm32_pointers_above_2_gib_are_unsigned():
    # wasmtime passes an i32 signed: an address past 2 GiB arrives negative.
    _, state = _memory(False)
    assert state.pointer(-(2**31)) == 2**31
    _, state64 = _memory(True)
    assert state64.pointer(5 * 2**32) == 5 * 2**32
