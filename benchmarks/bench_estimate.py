"""Time and peak memory of the offset estimator per rank (issue 5: "no large cost on top of the merge").

Usage: python benchmarks/bench_estimate.py [FOLDER ...]   (default: the recorded sets t39_tp2 and
t36_tp2 from $TOKENTRACE_BENCH_SETS, see examples/README.md; else the committed samples
tests/data/sample_t39_tp2 and sample_t36_tp2). Per rank: wall time of ``estimate_offset`` (VizTracer streaming + bounds; the Proton
kernels are loaded beforehand, as the merge has them), median of 3; peak Python memory during
the call (tracemalloc); the estimate against the anchors where both files have one.
"""

from __future__ import annotations

import gzip
import re
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import orjson

from tokentrace.align.estimate import estimate_offset
from tokentrace.units import us_to_ns

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_data import default_sets  # noqa: E402

RUNS = 3


def proton_kernels(path: Path) -> tuple[list[tuple[str, int, int]], int | None]:
    trace = orjson.loads(gzip.decompress(path.read_bytes()))
    rows = [(e["name"], us_to_ns(e["ts"]), us_to_ns(e["ts"]) + us_to_ns(e["dur"]))
            for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    return sorted(rows, key=lambda r: (r[1], r[2])), trace.get("baseTimeNanoseconds")


def viz_base(path: Path) -> int | None:
    found = re.search(rb'"baseTimeNanoseconds":\s*(\d+)', gzip.decompress(path.read_bytes())[-1 << 20:])
    return int(found.group(1)) if found else None


def bench_rank(viz: Path) -> str:
    kernels, proton_base = proton_kernels(viz.with_name(viz.name.replace(
        ".viztracer.json.gz", ".proton.chrome_trace.gz")))
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        est = estimate_offset(viz, kernels)
        times.append(time.perf_counter() - start)
    tracemalloc.start()
    estimate_offset(viz, kernels)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    base = viz_base(viz)
    if est.refused:
        verdict = f"refused: {est.reason}"
    elif proton_base is not None and base is not None:
        anchored = proton_base - base
        verdict = (f"estimate-anchor {(est.offset_ns - anchored) / 1000:+.1f} us, "
                   f"lo {(est.lo_ns - anchored) / 1000:+.1f} hi {(est.hi_ns - anchored) / 1000:+.1f}")
    else:
        verdict = "no Proton anchor"
    width = "-" if est.refused else f"{(est.hi_ns - est.lo_ns) / 1000:.1f} us"
    mb = gzip.open(viz).seek(0, 2) / 1e6
    return (f"{viz.name:<32} viz {mb:5.1f} MB  {statistics.median(times):.3f} s  "
            f"peak {peak / 2**20:5.1f} MiB  width {width:>10}  n_matches {est.n_matches:5d}  {verdict}")


def main(folders: list[str]) -> None:
    for folder in folders or [str(p) for p in default_sets("t39_tp2", "t36_tp2")]:
        for viz in sorted(Path(folder).glob("*.viztracer.json.gz")):
            print(bench_rank(viz), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
