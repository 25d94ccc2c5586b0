"""Embedded engine benchmark: module compile (cold/cached), load speed, bundled query latency.

Usage: python benchmarks/bench_engine.py [TRACE ...] [--build auto|wasm32|memory64|both]
                                         [--replicate K] [--queries] [--repeat N]
Default traces: the committed samples and, when $TOKENTRACE_BENCH_SETS holds it, the recorded
set t39_tp2 (examples/README.md) merged on the fly into a temporary folder. Each figure is the median of --repeat runs; prints one table.

``--replicate K`` first writes each (merged, plain JSON) trace K times over into a temporary
file: copy k has its pids and tids moved by ``100 * k``, its flow ids by ``k * (largest id +
1)``, its integer args by ``k * 10**9`` and its ranks renamed ``<rank>.k``, so the copies
never share a thread, an arrow or an arg set (Perfetto stores identical arg sets once, which
would make copies cheaper than a longer real run). That is
how the heap per input byte (``tokentrace.engine.sizing.HEAP_PER_INPUT_BYTE``) was measured,
and how the memory64 build was timed on traces beyond wasm32's 4 GiB heap. ``--build both``
loads every trace in each build; the load row gives the heap taken (and its ratio to the
input). ``--queries`` also times the bundled queries (on by default without ``--replicate``).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import orjson

from tokentrace.catalog import list_queries, run_query
from tokentrace.catalog.load import bundled_package
from tokentrace.engine import open_engine
from tokentrace.engine.wasm_module import MEMORY64_TUNING, find_wasm, load_module, new_engine
from tokentrace.errors import TokentraceWarning
from tokentrace.options import EngineOptions

ROOT = Path(__file__).resolve().parents[1]


def _median_time(action, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_compile(repeat: int, memory64: bool = False) -> list[tuple[str, str]]:
    """Cold compile (no cache) and cached load of one build, seconds."""
    import wasmtime
    wasm = find_wasm(memory64=memory64)
    tuning = MEMORY64_TUNING if memory64 else ""
    cold = _median_time(lambda: wasmtime.Module.from_file(new_engine(memory64), str(wasm)), 1)
    load_module(new_engine(memory64), wasm, tuning)  # make sure the cache is filled
    cached = _median_time(lambda: load_module(new_engine(memory64), wasm, tuning), repeat)
    return [(f"compile {wasm.name} cold", f"{cold:.2f} s"),
            (f"compile {wasm.name} cached", f"{cached * 1e3:.0f} ms")]


def _open(path: Path, build: str):
    return open_engine(path, EngineOptions(wasm_build=build), warn=False, sql_packages=[bundled_package()])


def bench_trace(path: Path, repeat: int, build: str = "auto",
                queries: bool = True) -> list[tuple[str, str]]:
    """Load speed (and heap) and each bundled query's latency on one trace."""
    rows = []
    loads = []
    for _ in range(repeat):
        with _open(path, build) as engine:
            loads.append(engine.load)
        gc.collect()  # let the instance's memory go before the next one grows
    load = sorted(loads, key=lambda info: info.seconds)[len(loads) // 2]
    size_mb = path.stat().st_size / 1e6
    heap = load.heap_bytes
    rows.append((f"load {path.name} [{load.build}]",
                 f"{load.seconds:.2f} s, {size_mb:.1f} MB on disk, {load.mb_per_s:.0f} MB/s, "
                 f"heap {heap / 2**20:.0f} MiB ({heap / path.stat().st_size:.2f} x input)"))
    if not queries:
        return rows
    with _open(path, build) as engine:
        for spec in list_queries():
            run_query(engine, spec)  # first run includes INCLUDE of the modules
            latency = _median_time(lambda: run_query(engine, spec), repeat)
            rows.append((f"  {spec.name} [{engine.load.build}]", f"{latency * 1e3:.1f} ms"))
    gc.collect()
    return rows


def replicate_trace(source: Path, out: Path, times: int) -> Path:
    """Writes ``source`` (plain JSON, object form) ``times`` over into ``out``; see the module
    docstring for what each copy changes."""
    data = orjson.loads(source.read_bytes())
    events = data.pop("traceEvents")
    stride = max((event["id"] for event in events if isinstance(event.get("id"), int)),
                 default=0) + 1
    with out.open("wb") as handle:
        handle.write(b'{"traceEvents": [\n')
        first = True
        for copy in range(times):
            for event in events:
                if copy:
                    event = _moved(event, copy, stride)
                if not first:
                    handle.write(b",\n")
                handle.write(orjson.dumps(event))
                first = False
        handle.write(b"\n],\n")
        handle.write(orjson.dumps(data)[1:])  # the other top-level keys, once
    return out


def _moved(event: dict, copy: int, stride: int) -> dict:
    shift = 100 * copy
    moved = dict(event)
    for key in ("pid", "tid"):
        if isinstance(moved.get(key), int):
            moved[key] += shift
    if isinstance(moved.get("id"), int):
        moved["id"] += copy * stride
    args = moved.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for key in ("gpu_pid", "host_pid", "host_main_tid"):
            if isinstance(args.get(key), int):
                args[key] += shift
        # Integer args unique per copy, as in a longer run (Perfetto stores an arg set once for
        # all the events that carry identical ones, which would make copies too cheap).
        for key, value in args.items():
            if type(value) is int and key not in ("gpu_pid", "host_pid", "host_main_tid",
                                                   "sort_index"):
                args[key] = value + copy * 10**9
        if isinstance(args.get("rank"), str):
            args["rank"] = f"{args['rank']}.{copy}"
        if moved.get("name") == "process_name" and isinstance(args.get("name"), str):
            args["name"] = f"{args['name']} copy {copy}"
        moved["args"] = args
    return moved


def _default_traces(tmp: Path) -> list[Path]:
    traces = [ROOT / "tests/data/sample_t39_tp2/sample-TP0.proton.chrome_trace.gz",
              ROOT / "tests/data/sample_t39_tp2/sample-TP0.viztracer.json.gz"]
    from bench_data import sets_folder

    shared = (sets_folder() or ROOT / "no-sets") / "t39_tp2"
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
    parser.add_argument("--build", choices=("auto", "wasm32", "memory64", "both"),
                        default="auto")
    parser.add_argument("--replicate", type=int, default=0, metavar="K")
    parser.add_argument("--queries", action="store_true")
    parser.add_argument("--no-compile", action="store_true", help="skip the compile rows")
    args = parser.parse_args()
    warnings.simplefilter("ignore", TokentraceWarning)
    builds = ("wasm32", "memory64") if args.build == "both" else (args.build,)
    queries = args.queries or not args.replicate
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        if not args.no_compile:
            for build in builds:
                rows += bench_compile(args.repeat, memory64=build == "memory64")
        traces = args.traces or _default_traces(Path(tmp))
        if args.replicate:
            traces = [replicate_trace(trace, Path(tmp) / f"{trace.stem}.x{args.replicate}.json",
                                      args.replicate) for trace in traces]
        for trace in traces:
            for build in builds:
                rows += bench_trace(trace, args.repeat, build, queries)
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
