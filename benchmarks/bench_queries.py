"""Stall-analysis query latency on the embedded engine.

Usage: python benchmarks/bench_queries.py [FOLDER ...]   (default: the recorded sets t39_tp2 and
t36_tp2 from $TOKENTRACE_BENCH_SETS, see examples/README.md; else the committed samples). Each folder is merged (per rank and combined) into a
temporary folder; for each merged file and query it prints the *cold* latency (fresh engine:
includes creating the tokentrace module tables the query INCLUDEs) and the *warm* latency
(median of --repeat further runs on the same engine), with the row count. Trace loading is not
counted (see bench_engine.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

from tokentrace.catalog import open_trace, run_query
from tokentrace.errors import TokentraceWarning
from tokentrace.merge import merge
from tokentrace.options import MergeOptions

ROOT = Path(__file__).resolve().parents[1]
QUERIES = [("gpu_windows", {}), ("gpu_gaps", {}), ("host_stalls", {}), ("host_stall_profile", {}),
           ("host_stall_profile", {"min_gap_us": "2ms", "host_only": True}),
           ("host_stall_profile", {"max_gap_us": "2ms", "host_only": True}),
           ("step_breakdown", {}), ("launch_latency", {}), ("rank_skew", {}),
           ("collective_skew", {})]


def _timed(action):
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def bench_file(path: Path, repeat: int) -> list[str]:
    """One line per query: cold and warm latency on ``path``."""
    lines = []
    for name, params in QUERIES:
        with open_trace(path, warn=False) as engine:
            cold, rows = _timed(lambda: run_query(engine, name, params))
            warm = statistics.median(_timed(lambda: run_query(engine, name, params))[0]
                                     for _ in range(repeat))
        label = name + "".join(f" {k}={v}" for k, v in params.items())
        lines.append(f"  {label:<48} cold {cold * 1e3:7.0f} ms   warm {warm * 1e3:6.0f} ms"
                     f"   {len(rows):6d} rows")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore", TokentraceWarning)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_data import default_sets

    folders = args.folders or default_sets("t39_tp2", "t36_tp2")
    with tempfile.TemporaryDirectory() as tmp:
        for folder in folders:
            result = merge([folder], Path(tmp) / folder.name, MergeOptions(combine=True))
            for path in [result.outputs[0], result.combined]:
                print(f"{folder.name}/{path.name} ({path.stat().st_size / 1e6:.0f} MB)", flush=True)
                for line in bench_file(path, args.repeat):
                    print(line, flush=True)


if __name__ == "__main__":
    main()
