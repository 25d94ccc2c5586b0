"""Speed and peak memory of ``tokentrace merge`` vs the naive reference merger, one rank.

Usage: python benchmarks/bench_merge.py [FOLDER] [TAG]   (default TP0 of the recorded set t39_tp2
from $TOKENTRACE_BENCH_SETS, see examples/README.md; else of the committed sample_t39_tp2)

Each measurement runs in a fresh child process; peak memory is the child's max RSS
(``resource.getrusage(RUSAGE_CHILDREN)`` read in a wrapper process per run).
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analyze import compile_package  # noqa: E402

CHILD = r'''
import json, gzip, resource, sys, time
from pathlib import Path
kind, viz, proton, out = sys.argv[1:5]
t = time.perf_counter()
if kind == "naive":
    op = lambda p: gzip.open(p, "rt") if p.endswith(".gz") else open(p)
    v = json.load(op(viz)); p = json.load(op(proton))
    off = (p["baseTimeNanoseconds"] - v["viztracer_metadata"]["baseTimeNanoseconds"]) / 1000
    for e in p["traceEvents"]:
        if "ts" in e: e["ts"] += off
    v["traceEvents"] += p["traceEvents"]
    json.dump(v, open(out, "w"))
else:
    from tokentrace.merge import merge
    from tokentrace.options import MergeOptions
    merge([Path(viz), Path(proton)], Path(out), MergeOptions(check_anchors=kind == "ours"))
peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
print(time.perf_counter() - t, peak / 1024)  # children: the forked host copy
'''


def run(kind: str, viz: Path, proton: Path, out: Path, repeat: int = 5) -> tuple[float, float]:
    """Median wall seconds (inside the child) and peak RSS MiB of ``repeat`` runs."""
    runs = []
    for _ in range(repeat):
        done = subprocess.run([sys.executable, "-c", CHILD, kind, str(viz), str(proton), str(out)],
                              capture_output=True, text=True, check=True)
        runs.append(tuple(map(float, done.stdout.split())))
    runs.sort()
    return runs[len(runs) // 2]


def triple(viz_plain: Path, out: Path) -> None:
    """A VizTracer report with its events written three times (same metadata)."""
    raw = viz_plain.read_bytes()
    start = raw.index(b"[") + 1
    end = raw.rindex(b'], "viztracer_metadata"')
    body = raw[start:end]
    out.write_bytes(raw[:start] + body + b", " + body + b", " + body + raw[end:])


def prepare(viz_gz: Path, proton_gz: Path, tmp: Path) -> None:
    """Decompresses the inputs to ``tmp`` and writes the 3x VizTracer report."""
    for src in (viz_gz, proton_gz):
        dst = tmp / src.name[:-3].replace(src.name.split("-")[0], "plain", 1)
        with gzip.open(src, "rb") as fin, open(dst, "wb") as fout:
            shutil.copyfileobj(fin, fout)
    triple(tmp / viz_gz.name[:-3].replace(viz_gz.name.split("-")[0], "plain", 1), tmp / "big-TP0.viztracer.json")


def main() -> None:
    if sys.argv[1:2] == ["--prepare"]:
        prepare(*map(Path, sys.argv[2:5]))
        return
    compile_package()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_data import find_set

    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else find_set("t39_tp2")
    tag = sys.argv[2] if len(sys.argv) > 2 else "TP0"
    viz_gz = next(folder.glob(f"*-{tag}.viztracer.json.gz"))
    proton_gz = next(folder.glob(f"*-{tag}.proton.chrome_trace.gz"))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        plain = {src: tmp / src.name[:-3].replace(src.name.split("-")[0], "plain", 1) for src in (viz_gz, proton_gz)}
        big = tmp / "big-TP0.viztracer.json"
        # prepared in a child: Linux keeps a parent's peak RSS in its children's ru_maxrss
        subprocess.run([sys.executable, __file__, "--prepare", str(viz_gz), str(proton_gz), str(tmp)], check=True)
        cases = [(".gz inputs", viz_gz, proton_gz), ("plain inputs", plain[viz_gz], plain[proton_gz]),
                 ("plain, 3x VizTracer", big, plain[proton_gz])]
        print(f"{'case':22} {'naive s':>8} {'naive MiB':>9} {'ours s':>7} {'ours MiB':>8} {'speed-up':>8} "
          f"{'mem ratio':>9} {'no check s':>10} {'speed-up':>8}")
        for label, viz, proton in cases:
            naive = run("naive", viz, proton, tmp / "naive.json")
            ours = run("ours", viz, proton, tmp / "ours.json")  # with the anchor check (default)
            fast = run("ours-no-check", viz, proton, tmp / "ours.json")  # --no-check-anchors
            print(f"{label:22} {naive[0]:8.2f} {naive[1]:9.0f} {ours[0]:7.3f} {ours[1]:8.0f} "
                  f"{naive[0] / ours[0]:7.1f}x {naive[1] / ours[1]:8.1f}x {fast[0]:10.3f} {naive[0] / fast[0]:7.1f}x")


if __name__ == "__main__":
    main()
