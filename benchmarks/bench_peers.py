"""``tokentrace analyze`` against its peers (issue 33): Holistic Trace Analysis (HTA) on the
recorded torch-profiler sets, the reference merger on the recorded Proton sets.

Usage: python benchmarks/bench_peers.py [--hta-python PY] [--pairs N] [--sets DIR] [--reference FILE]
                                        [--work DIR] [--only NAME ...] [--json FILE] [--floor]

Run it with the Python that has tokentrace installed (its ``tokentrace`` is the one measured).
HTA is never a dependency of tokentrace: install it in a venv of its own and name that venv's
Python with ``--hta-python`` or ``$TOKENTRACE_BENCH_HTA_PYTHON``, e.g.::

    python3 -m venv /tmp/htavenv && /tmp/htavenv/bin/pip install HolisticTraceAnalysis
    .venv/bin/python benchmarks/bench_peers.py --hta-python /tmp/htavenv/bin/python

Without it the HTA cases are skipped. ``--sets DIR`` (default ``$TOKENTRACE_BENCH_SETS``) holds
the recorded sets (recorded by the workloads in ``examples/``, the commands in examples/README.md);
without it only the committed sample runs. ``--reference FILE`` (default
``$TOKENTRACE_BENCH_REFERENCE``) is tokenspeed's ``tokenspeed_trace_merge.py``; without it the
reference cases are skipped.

Cases, each command a fresh process, in interleaved rounds (analyze, analyze --no-plots, peer;
again ...; ``--pairs`` rounds, default 3), medians printed:
* torch-profiler sets (``engine_kineto``, ``engine_mixed_kineto``, ``engine_kineto_stack``,
  ``engine_cb_viz``, ``engine_cb_stack``, ``compile_kineto``; the recorded folders as they are,
  gzipped): ``tokentrace analyze SET -o OUT`` (every answer, with the set's VizTracer file where
  it has one) against what a torch-profiler user runs in HTA: ``TraceAnalysis(trace_dir=D)``
  + ``get_idle_time_breakdown(visualize=False)`` + ``get_gpu_kernel_breakdown(visualize=False)``,
  D a temporary folder of symbolic links to the set's ``*.trace.json.gz`` (HTA reads every
  trace file of the folder as one rank; these traces carry no ``distributedInfo`` rank, which
  HTA warns about and takes as rank 0);
* Proton sets (``tests/data/sample_t39_tp2``, ``t39_tp2``, ``engine_mixed``, decompressed once,
  as the reference reads plain JSON only): ``tokentrace analyze`` of the plain folder against the
  reference's merge alone (tokenspeed's ``tokenspeed_trace_merge.py --all-ranks``, run as the
  script in place).
``analyze`` runs from scratch every time: a fresh ``-o`` folder and ``$TOKENTRACE_CACHE_DIR``
(where the merge is cached) pointed at a folder of the benchmark whose ``merged/`` and
``annotated/`` are removed before each run. Only ``wasm/`` (the compiled engine, made once per
install) is kept, warmed by one unmeasured run first. tokentrace is byte-compiled first, as a
wheel's install leaves it.

Printed per case and tool: wall seconds, CPU seconds (user + system of the process and all its
waited-for descendants, from ``wait4``: what a shared 2-core machine measures reliably), peak
memory (MiB, the largest sum of the resident sizes of the process tree, sampled every 20 ms; in
brackets, PSS: the largest sum of its proportional sizes, shared pages counted once), and the
ratios analyze / peer of CPU and wall, with and without figures (lower is better for tokentrace;
issue 33's targets: CPU <= 1.0x HTA, wall <= 0.5x the reference's merge). Also the laps each
tool prints: analyze's ``merge and queries / write / annotate`` and HTA's
``import / load / idle / kernels`` (in-process wall seconds).

``--floor`` (HTA cases): what analyze spends before any analysis, in the same rounds:
``tokentrace merge SET -o M`` alone, and Perfetto's import of M's merged trace alone (the
embedded engine as analyze runs it, no query) less a process that makes the same imports and
loads nothing; their sum over HTA's CPU is the least CPU ratio analyze could reach on the set
while it merges and loads as it does.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analyze import compile_package, run_measured  # noqa: E402
from bench_data import DATA, reference_script, sets_folder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CLI = "import sys; from tokentrace.cli import main; sys.argv[0] = 'tokentrace'; main()"
HTA_ENV = "TOKENTRACE_BENCH_HTA_PYTHON"
KINETO_SETS = ["engine_kineto", "engine_mixed_kineto", "engine_kineto_stack", "engine_cb_viz",
               "engine_cb_stack", "compile_kineto"]
PROTON_SETS = ["sample_t39_tp2", "t39_tp2", "engine_mixed"]
HTA_DRIVER = """\
import sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
idle = analysis.get_idle_time_breakdown(visualize=False)
t3 = time.perf_counter()
kernels = analysis.get_gpu_kernel_breakdown(visualize=False)
t4 = time.perf_counter()
idle = idle[0] if isinstance(idle, tuple) else idle
kernels = kernels[0] if isinstance(kernels, tuple) else kernels
print(f"hta laps: import {t1 - t0:.2f} load {t2 - t1:.2f} idle {t3 - t2:.2f} kernels {t4 - t3:.2f}"
      f" ({len(idle)} idle rows, {len(kernels)} kernel rows)")
"""
# Loads each merged trace given into the engine analyze uses (embedded, no stop checks), runs no
# query; with no file, only the imports.
LOAD_DRIVER = """\
import sys
from tokentrace.catalog import open_trace
from tokentrace.options import EngineOptions
for path in sys.argv[1:]:
    open_trace(path, EngineOptions(stoppable=False)).close()
"""
_ANALYZE_LAPS = re.compile(r"\((merge and queries [^)]*)\)")
_HTA_LAPS = re.compile(r"hta laps: (.*)")


class Bench:
    def __init__(self, tmp: Path, hta_python: str | None, reference: Path | None):
        self.tmp = tmp
        self.hta_python = hta_python
        self.script = reference
        self.cache = tmp / "tokentrace-cache"
        self.env = {**os.environ, "TOKENTRACE_CACHE_DIR": str(self.cache)}

    def _fresh(self, out: Path, inputs: Path) -> None:
        """Nothing of an earlier merge left where analyze looks: its -o folder, the user
        cache's merged/ and annotated/ (the compiled wasm/ stays)."""
        for path in (out, self.cache / "merged", self.cache / "annotated"):
            shutil.rmtree(path, ignore_errors=True)

    def analyze(self, inputs: Path, plots: bool) -> dict:
        out = self.tmp / "analyze-out"
        self._fresh(out, inputs)
        command = [sys.executable, "-c", CLI, "analyze", str(inputs), "-o", str(out)]
        result = _run(command + ([] if plots else ["--no-plots"]), env=self.env)
        found = _ANALYZE_LAPS.search(result.get("out", ""))
        result["laps"] = found.group(1) if found else ""
        self._fresh(out, inputs)
        return result

    def hta(self, traces: Path) -> dict:
        result = _run([self.hta_python, "-c", HTA_DRIVER, str(traces)])
        found = _HTA_LAPS.search(result.get("out", ""))
        result["laps"] = found.group(1) if found else ""
        return result

    def floor(self, inputs: Path) -> dict:
        """The merge alone, then the load alone of what it wrote, less the load's imports: CPU
        and wall seconds (summed), for :data:`LOAD_DRIVER`."""
        out = self.tmp / "floor-merged"
        shutil.rmtree(out, ignore_errors=True)
        merged = _run([sys.executable, "-c", CLI, "merge", str(inputs), "-o", str(out)], env=self.env)
        traces = [str(path) for path in sorted(out.glob("*.json"))]
        loaded = _run([sys.executable, "-c", LOAD_DRIVER, *traces], env=self.env)
        imports = _run([sys.executable, "-c", LOAD_DRIVER], env=self.env)
        shutil.rmtree(out, ignore_errors=True)
        failed = next((run for run in (merged, loaded, imports) if "error" in run), None)
        if failed is not None:
            return failed
        return {key: merged[key] + loaded[key] - imports[key] for key in ("cpu", "wall")} | {
            "tree_mib": max(merged["tree_mib"], loaded["tree_mib"]),
            "pss_mib": max(merged["pss_mib"], loaded["pss_mib"]), "merge_cpu": merged["cpu"],
            "load_cpu": loaded["cpu"] - imports["cpu"],
            "laps": f"merge {merged['cpu']:.2f} cpu, load {loaded['cpu'] - imports['cpu']:.2f} cpu"}

    def reference(self, folder: Path) -> dict:
        script = self.script
        out = self.tmp / "reference.json"
        command = [sys.executable, str(script), "--all-ranks"]
        for rank, viz in enumerate(sorted(folder.glob("*.viztracer.json"))):
            proton = viz.with_name(viz.name.replace(".viztracer.json", ".proton.chrome_trace"))
            command += ["--rank", str(rank), str(viz), str(proton)]
        result = _run(command + ["-o", str(out)], cwd=script.parent)  # run in place, as it asks
        result["laps"] = ""
        out.unlink(missing_ok=True)
        return result


def _run(command: list[str], cwd: Path | None = None, env: dict | None = None) -> dict:
    """run_measured, a failure recorded (its last lines) instead of ending the benchmark."""
    try:
        return run_measured(command, cwd=cwd, env=env)
    except SystemExit as failed:
        lines = [line for line in str(failed).splitlines() if line.strip()]
        return {"error": " | ".join(lines[-3:])[-600:]}


def hta_folder(traces: Path, work: Path) -> Path:
    """A folder of symbolic links to the set's torch-profiler traces: what HTA's trace_dir reads."""
    folder = work / f"hta-{traces.name}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for trace in sorted(traces.glob("*.trace.json*")):
        (folder / trace.name).symlink_to(trace)
    return folder


def plain_folder(source: Path, work: Path) -> Path:
    """The Proton set decompressed into ``work`` (kept between runs): the reference reads plain
    JSON only, and both tools get the same inputs."""
    folder = work / f"plain-{source.name}"
    if not (folder / "done").exists():
        folder.mkdir(parents=True, exist_ok=True)
        for src in source.glob("*.gz"):
            if ".truth." in src.name:
                continue
            with gzip.open(src, "rb") as fin, open(folder / src.name[:-3], "wb") as fout:
                shutil.copyfileobj(fin, fout)
        (folder / "done").touch()
    return folder


def _median(runs: list[dict], key: str) -> float | None:
    good = [run[key] for run in runs if "error" not in run]
    return statistics.median(good) if good else None


def _cell(runs: list[dict]) -> str:
    errors = [run["error"] for run in runs if "error" in run]
    if len(errors) == len(runs):
        return f"failed: {errors[0]}"
    return f"{_median(runs, 'wall'):6.2f} s {_median(runs, 'cpu'):6.2f} cpu {_median(runs, 'tree_mib'):5.0f} MiB ({_median(runs, 'pss_mib'):5.0f} PSS)"


def _ratio(ours: list[dict], peer: list[dict], key: str) -> str:
    a, b = _median(ours, key), _median(peer, key)
    return f"{a / b:.2f}" if a is not None and b else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hta-python", default=os.environ.get(HTA_ENV),
                        help=f"Python of a venv with HolisticTraceAnalysis (default: ${HTA_ENV})")
    parser.add_argument("--pairs", type=int, default=3, help="interleaved rounds per case")
    parser.add_argument("--sets", type=Path, default=sets_folder(),
                        help="the folder of recorded sets (default: $TOKENTRACE_BENCH_SETS)")
    parser.add_argument("--reference", type=Path, help="tokenspeed's tokenspeed_trace_merge.py "
                        "(default: $TOKENTRACE_BENCH_REFERENCE; none: the reference cases are skipped)")
    parser.add_argument("--work", type=Path, help="keep (and reuse) the decompressed Proton sets here")
    parser.add_argument("--only", nargs="*", help="only the sets whose name contains one of these")
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    parser.add_argument("--floor", action="store_true",
                        help="HTA cases: also the merge alone and the load alone (see above)")
    args = parser.parse_args()
    hta_python = args.hta_python
    if hta_python and subprocess.run([hta_python, "-c", "import hta"], capture_output=True).returncode:
        raise SystemExit(f"{hta_python}: no HolisticTraceAnalysis (import hta failed)")
    compile_package()
    cases = []
    for name in KINETO_SETS:
        if hta_python and args.sets is not None and (args.sets / name).is_dir():
            cases.append((name, "hta", args.sets / name))
    reference = reference_script(args.reference)
    for name in PROTON_SETS:
        source = DATA / name if name.startswith("sample") else (args.sets or DATA / "no-sets") / name
        if reference is not None and source.is_dir():
            cases.append((name, "reference", source))
    if args.only:
        cases = [case for case in cases if any(word in case[0] for word in args.only)]
    if not hta_python:
        print(f"HTA cases skipped: no --hta-python or ${HTA_ENV}", flush=True)
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        work = args.work or tmp
        bench = Bench(tmp, hta_python, reference)
        print(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; medians of {args.pairs} interleaved rounds",
              flush=True)
        warm = bench.analyze(cases[0][2], plots=False) if cases else {}
        if "error" in warm:
            raise SystemExit(f"tokentrace analyze failed: {warm['error']}")
        for name, peer, source in cases:
            inputs = source if peer == "hta" else plain_folder(source, work)
            peer_input = hta_folder(source, tmp) if peer == "hta" else inputs
            floor = args.floor and peer == "hta"
            runs = {"analyze": [], "analyze --no-plots": [], **({"merge + load": []} if floor else {}), peer: []}
            for _ in range(args.pairs):
                runs["analyze"].append(bench.analyze(inputs, plots=True))
                runs["analyze --no-plots"].append(bench.analyze(inputs, plots=False))
                if floor:
                    runs["merge + load"].append(bench.floor(inputs))
                runs[peer].append(bench.hta(peer_input) if peer == "hta" else bench.reference(peer_input))
            print(f"\n{name} (vs {peer})", flush=True)
            for tool, tool_runs in runs.items():
                laps = next((run["laps"] for run in tool_runs if run.get("laps")), "")
                print(f"  {tool:20} {_cell(tool_runs)}  {laps}", flush=True)
            for tool in [tool for tool in runs if tool != peer]:
                print(f"  {tool + ' / ' + peer:30} cpu {_ratio(runs[tool], runs[peer], 'cpu'):>5}"
                      f"  wall {_ratio(runs[tool], runs[peer], 'wall'):>5}", flush=True)
            records.append({"set": name, "peer": peer,
                            "runs": {tool: [{k: v for k, v in run.items() if k != "out"} for run in tool_runs]
                                     for tool, tool_runs in runs.items()}})
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
