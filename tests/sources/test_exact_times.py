"""Epoch-µs start times with ns decimals (Kineto before torch 2.4) read to the nanosecond: a
float64 would move them by up to 125 ns (tokentrace.sources.exact_times)."""

from __future__ import annotations

import contextlib
import gzip

import pytest

from tokentrace.options import RawOptions
from tokentrace.sources.backend import reading
from tokentrace.sources.kineto import read_kineto

# One launch and its kernel, as such a trace writes them; a float parse of these starts is off
# (1712195495505582.988 reads as ...582.9880 only by luck; ...583.1234 as ...583.125).
TRACE = b"""{"schemaVersion": 1, "traceEvents": [
{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 11, "tid": 11,
 "ts": 1712195495505582.988, "dur": 4.021, "args": {"correlation": 7}},
{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
 "ts": 1712195495505590.1234, "dur": 2.5, "args": {"correlation": 7}},
{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
 "ts": 1712195495505601.067, "dur": 1, "args": {"correlation": 8}}
]}"""
EXPECTED = {"cudaLaunchKernel": [1712195495505582988], "k": [1712195495505590123, 1712195495505601067]}


@pytest.mark.parametrize("raw", [None, RawOptions(chunk_bytes=64, piecewise_bytes=128, piece_bytes=96)],
                         ids=["whole", "in pieces"])
def test_epoch_microseconds_with_ns_decimals_are_exact(tmp_path, raw):
    path = tmp_path / "r.pt.trace.json.gz"
    path.write_bytes(gzip.compress(TRACE))
    with reading(raw) if raw is not None else contextlib.nullcontext():
        trace = read_kineto(path)
    found: dict[str, list[int]] = {}
    for event in trace.gpu.events:
        if event.ph == "X":
            found.setdefault(event.raw["name"], []).append(event.ts_ns)
    assert found == EXPECTED
    assert round(1712195495505590.1234 * 1000) != EXPECTED["k"][0]  # what a float parse gives


def test_a_bad_start_is_still_named(tmp_path):
    path = tmp_path / "r.pt.trace.json"
    path.write_bytes(TRACE.replace(b'"ts": 1712195495505601.067', b'"ts": "soon"'))
    with pytest.raises(Exception, match=r"traceEvents\[2\].*ts 'soon'"):
        read_kineto(path)
