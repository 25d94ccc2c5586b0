"""Every merge and analyze figure of the scale issue, side by side with the reference merger
(tokenspeed's ``tokenspeed_trace_merge.py``, run as the script in place) in one run.

Usage: python benchmarks/bench_reference.py --reference FILE [--repeat R] [--big K] [--work DIR]
                                            [--only NAME ...]
``--reference`` (default ``$TOKENTRACE_BENCH_REFERENCE``): the reference merger, from the tokenspeed
repository. The sets ``t39_tp2`` and ``engine_mixed`` come from ``$TOKENTRACE_BENCH_SETS`` (recorded
by the workloads in ``examples/``, the commands in examples/README.md); without them the committed
sample ``tests/data/sample_t39_tp2`` stands in for ``t39_tp2`` and ``engine_mixed`` is left out.

Cases (plain JSON inputs, as the reference reads nothing else; each run a fresh process):
* ``merge 1 rank``: t39_tp2 TP0 (55 MB VizTracer + 4.5 MB Proton) and engine_mixed DP0-TP0
  (60 + 27 MB): ``tokentrace merge VIZ PROTON -o OUT`` vs the reference's single-rank merge;
* ``--combine 2 ranks``: t39_tp2 and engine_mixed: ``tokentrace merge DIR --combine`` vs the
  reference's ``--all-ranks``;
* ``analyze 2 ranks``: ``tokentrace analyze DIR -o OUT`` (nothing cached: a fresh user cache but
  for the compiled engine) vs the same reference
  merge (the issue's target compares analyze with the reference's merge alone);
* ``--big K`` (default 0: off): t39_tp2 TP0 replicated K times in time (``replicate.py``;
  K = 8 gives a ~505 MB rank): merge and analyze of it vs the reference's merge.
  ``--big-set engine_mixed --big 6`` replicates that set's first rank instead: 484k kernels,
  356 MB VizTracer and 164 MB Proton, the shape of a long serving run.
tokentrace is byte-compiled first, as ``pip install`` of a wheel leaves it
(``bench_analyze.compile_package``). Printed per case: wall seconds, CPU seconds (user + system
of the process and its descendants: what a shared 2-core machine measures reliably), peak memory
(MiB: the largest sum of resident sizes of the process tree, sampled every 20 ms; ``PSS``: the
largest sum of its proportional sizes, a page a forked engine shares counted once), both tools,
and the ratios reference / tokentrace (higher is better for tokentrace) of wall and of CPU.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analyze import compile_package, run_measured  # noqa: E402
from bench_data import find_set, fresh_cache, reference_script  # noqa: E402
from replicate import replicate  # noqa: E402

CLI = "import sys; from tokentrace.cli import main; sys.argv[0] = 'tokentrace'; main()"
SETS = {"t39": ("t39_tp2", "run2"), "mixed": ("engine_mixed", "mix")}
REFERENCE = Path("tokenspeed_trace_merge.py")  # set by main() from --reference
_TAG_RE = re.compile(r"^.+?-(?P<tag>(?:[A-Z]+\d+-)*TP-?\d+)\.viztracer\.json")


def plain_set(name: str, work: Path) -> Path:
    """The recorded set decompressed into ``work/name`` (kept between runs)."""
    folder = work / name
    if not (folder / "done").exists():
        folder.mkdir(parents=True, exist_ok=True)
        for src in find_set(name).glob("*.gz"):
            with gzip.open(src, "rb") as fin, open(folder / src.name[:-3], "wb") as fout:
                shutil.copyfileobj(fin, fout)
        (folder / "done").touch()
    return folder


def ranks_of(folder: Path) -> list[tuple[Path, Path]]:
    return [(viz, viz.with_name(viz.name.replace(".viztracer.json", ".proton.chrome_trace")))
            for viz in sorted(folder.glob("*.viztracer.json"))]


def ours_merge(pairs, out: Path, combine: bool) -> list[str]:
    inputs = [str(pairs[0][0].parent)] if combine else [str(p) for p in pairs[0]]
    return [sys.executable, "-c", CLI, "merge", *inputs, *(["--combine"] if combine else []), "-o", str(out)]


def ours_analyze(pairs, out: Path) -> list[str]:
    return [sys.executable, "-c", CLI, "analyze", str(pairs[0][0].parent), "-o", str(out)]


def reference(pairs, out: Path) -> list[str]:
    if len(pairs) == 1:
        return [sys.executable, str(REFERENCE), str(pairs[0][0]), str(pairs[0][1]), "-o", str(out)]
    command = [sys.executable, str(REFERENCE), "--all-ranks"]
    for rank, (viz, proton) in enumerate(pairs):
        command += ["--rank", str(rank), str(viz), str(proton)]
    return command + ["-o", str(out)]


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def measure(command: list[str], out: Path, repeat: int) -> dict:
    runs = []
    cache = out.parent / "user-cache"
    for _ in range(repeat):
        _remove(out)
        shutil.rmtree(cache / "merged", ignore_errors=True)  # nothing cached but the engine
        runs.append(run_measured(command, cwd=REFERENCE.parent if str(REFERENCE) in command else None,
                                 env=fresh_cache(cache)))
    _remove(out)
    return {key: statistics.median(run[key] for run in runs) for key in ("wall", "cpu", "tree_mib", "pss_mib")}


def cases(work: Path, big: int, big_set: str) -> list[tuple[str, str, list]]:
    """(label, kind, rank pairs)."""
    found = []
    for short, (name, _) in SETS.items():
        if find_set(name) is None:
            continue
        pairs = ranks_of(plain_set(name, work))
        found += [(f"merge 1 rank {short}", "merge", pairs[:1]),
                  (f"--combine 2 ranks {short}", "combine", pairs),
                  (f"analyze 2 ranks {short}", "analyze", pairs)]
    if big:
        folder = work / f"big{big}-{big_set}"
        if not (folder / "done").exists():
            shutil.rmtree(folder, ignore_errors=True)
            source = find_set(big_set)
            first_tag = _TAG_RE.match(min(p.name for p in source.glob("*.viztracer.json*")))["tag"]
            replicate(source, folder, tags=[first_tag], times=big, profile_id="big")
            (folder / "done").touch()
        pairs = ranks_of(folder)
        size = sum(p.stat().st_size for p in pairs[0]) / 1e6
        found += [(f"merge 1 rank {size:.0f} MB", "merge", pairs), (f"analyze 1 rank {size:.0f} MB", "analyze", pairs)]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, help="tokenspeed's tokenspeed_trace_merge.py "
                        "(default: $TOKENTRACE_BENCH_REFERENCE)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--big", type=int, default=0, help="also a rank of t39 TP0 replicated K times")
    parser.add_argument("--big-set", default="t39_tp2", help="the set whose first rank --big replicates "
                        "(engine_mixed x6: 484k kernels, 356 MB VizTracer, 164 MB Proton)")
    parser.add_argument("--work", type=Path, help="keep (and reuse) the plain inputs here")
    parser.add_argument("--only", nargs="*", help="only the cases whose label contains one of these")
    args = parser.parse_args()
    global REFERENCE
    found = reference_script(args.reference)
    if found is None:
        raise SystemExit("no reference merger: pass --reference tokenspeed_trace_merge.py (the tokenspeed "
                         "repository) or set $TOKENTRACE_BENCH_REFERENCE")
    REFERENCE = found
    compile_package()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        work = args.work or tmp
        print(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; medians of {args.repeat}", flush=True)
        print(f"{'case':26} {'ours s':>7} {'cpu s':>6} {'MiB':>6} {'PSS':>6} {'ref s':>7} {'cpu s':>6} {'MiB':>6}"
              f" {'wall x':>7} {'cpu x':>6}", flush=True)
        for label, kind, pairs in cases(work, args.big, args.big_set):
            if args.only and not any(word in label for word in args.only):
                continue
            out = tmp / ("out" if kind == "analyze" else "out.json")
            command = ours_analyze(pairs, out) if kind == "analyze" else ours_merge(pairs, out, kind == "combine")
            ours = measure(command, out, args.repeat)
            ref = measure(reference(pairs, tmp / "ref.json"), tmp / "ref.json", args.repeat)
            print(f"{label:26} {ours['wall']:7.2f} {ours['cpu']:6.2f} {ours['tree_mib']:6.0f} {ours['pss_mib']:6.0f}"
                  f" {ref['wall']:7.2f} {ref['cpu']:6.2f} {ref['tree_mib']:6.0f}"
                  f" {ref['wall'] / ours['wall']:6.1f}x {ref['cpu'] / ours['cpu']:5.1f}x", flush=True)


if __name__ == "__main__":
    main()
