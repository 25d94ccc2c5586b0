"""Embedded engine benchmark: module compile (cold/cached), load speed, bundled query latency.

Usage: python benchmarks/bench_engine.py [TRACE ...]
Default traces: the committed samples and, when present, ../shared/traces/t39_tp2 merged on the
fly into a temporary folder. Each figure is the median of --repeat runs; prints one table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import wasmtime

from tokentrace.catalog import list_queries, open_trace, run_query
from tokentrace.engine.wasm_module import find_wasm, load_module
from tokentrace.errors import TokentraceWarning

ROOT = Path(__file__).resolve().parents[1]


def _median_time(action, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_compile(repeat: int) -> list[tuple[str, str]]:
    """Cold compile (no cache) and cached load of trace_processor.wasm, seconds."""
    wasm = find_wasm()
    cold = _median_time(lambda: wasmtime.Module.from_file(wasmtime.Engine(), str(wasm)), 1)
    load_module(wasmtime.Engine(), wasm)  # make sure the cache is filled
    cached = _median_time(lambda: load_module(wasmtime.Engine(), wasm), repeat)
    return [("compile cold", f"{cold:.2f} s"), ("compile cached", f"{cached * 1e3:.0f} ms")]


def bench_trace(path: Path, repeat: int) -> list[tuple[str, str]]:
    """Load speed and each bundled query's latency on one trace."""
    rows = []
    loads = []
    for _ in range(repeat):
        with open_trace(path, warn=False) as engine:
            loads.append(engine.load)
    load = sorted(loads, key=lambda info: info.seconds)[len(loads) // 2]
    size_mb = path.stat().st_size / 1e6
    rows.append((f"load {path.name}", f"{load.seconds:.2f} s, {size_mb:.1f} MB on disk, "
                                      f"{load.mb_per_s:.0f} MB/s"))
    with open_trace(path, warn=False) as engine:
        for spec in list_queries():
            run_query(engine, spec)  # first run includes INCLUDE of the modules
            latency = _median_time(lambda: run_query(engine, spec), repeat)
            rows.append((f"  {spec.name}", f"{latency * 1e3:.1f} ms"))
    return rows


def _default_traces(tmp: Path) -> list[Path]:
    traces = [ROOT / "tests/data/sample_t39_tp2/sample-TP0.proton.chrome_trace.gz",
              ROOT / "tests/data/sample_t39_tp2/sample-TP0.viztracer.json.gz"]
    shared = ROOT.parent / "shared/traces/t39_tp2"
    if shared.is_dir():
        from tokentrace.merge import merge
        from tokentrace.options import MergeOptions
        result = merge([shared], tmp, MergeOptions(combine=True))
        traces += [result.outputs[0], result.combined]
    return traces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore", TokentraceWarning)
    with tempfile.TemporaryDirectory() as tmp:
        rows = bench_compile(args.repeat)
        for trace in args.traces or _default_traces(Path(tmp)):
            rows += bench_trace(trace, args.repeat)
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
