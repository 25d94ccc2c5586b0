"""``tokentrace analyze`` of N ranks vs the reference merger's merge alone of the same ranks.

Usage: python benchmarks/bench_analyze.py [--ranks 2,8,16] [--source FOLDER] [--jobs J]
                                          [--repeat R] [--work DIR] [--reference FILE] [--sql DIR]
Default source: the recorded set t39_tp2 when $TOKENTRACE_BENCH_SETS holds it (2 ranks, 120 steps,
55 MB of VizTracer JSON each; recorded by examples/serve_sim.py, see examples/README.md), else the
committed sample tests/data/sample_t39_tp2 (40 steps).

The N-rank profile is written once for the largest N by ``replicate.py --ranks N`` (rank r a
copy of source rank r mod 2, host pids moved so that no two ranks share one), as plain JSON (the
reference reads nothing else); the smaller N are the first N of those ranks (hard links). For
each N, each measured in its own process, ``--repeat`` times (the median is printed):
* ``tokentrace analyze FOLDER -o OUT`` (fresh OUT and a fresh user cache: nothing cached but the
  compiled engine), ``--jobs`` as given (default:
  the machine's cores): wall seconds, its own split (``merge/queries/write`` as it prints them),
  and peak memory;
* the reference (tokenspeed's ``tokenspeed_trace_merge.py --all-ranks``, given by ``--reference``
  or ``$TOKENTRACE_BENCH_REFERENCE``, run as the script in place, never copied; skipped without it): wall seconds and peak memory of merging the same N ranks into one file.
``cpu s``: user + system seconds of the process and its descendants (what a machine shared with
other jobs measures reliably; column ``cpu`` is their ratio). Peak memory: ``tree`` = the largest
sum of the resident sizes of the process and all its descendants, sampled every 20 ms from /proc
(analyze's per-rank worker processes run at once; a forked engine's pages shared with its parent
count twice); ``pss`` = the largest sum of their proportional sizes (each shared page counted
once in all), sampled every 100 ms; ``max`` = the largest single process (``ru_maxrss``). The
wall ratio analyze / reference is the issue's target: <= 1/3. ``--sql DIR``: analyze with another
copy of ``queries/`` (e.g. the committed one, for a before/after).
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_data import find_set, fresh_cache, reference_script  # noqa: E402
from replicate import replicate  # noqa: E402
from sql_dir import CHILD_PATCH  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_PAGE = os.sysconf("SC_PAGE_SIZE")
_LAPS_RE = re.compile(r"\(merge ([\d.]+) s, queries ([\d.]+) s, write ([\d.]+) s\)")


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def _tree_pids(root: int) -> list[int]:
    tree, todo, found = _children(), [root], []
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += tree.get(pid, [])
    return found


def _tree_rss(pids: list[int]) -> int:
    """Resident bytes of the processes now (pages a forked child shares with its parent count
    in both)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as statm:
                total += int(statm.read().split()[1]) * _PAGE
        except OSError:
            pass
    return total


def _tree_pss(pids: list[int]) -> int:
    """Proportional resident bytes of the processes now: a page shared by k of them counts 1/k
    in each, so the sum is the memory the tree holds. (The kernel walks every page table to
    answer: ~2.5 ms per resident GiB, so it is sampled less often than the RSS.)"""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
                for line in rollup:
                    if line.startswith(b"Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError):
            pass
    return total


def compile_package() -> None:
    """Byte-compiles tokentrace as ``pip install`` of a wheel does. An editable install whose
    processes may not write ``__pycache__`` (``PYTHONDONTWRITEBYTECODE=1``, as on this project's
    machines) compiles every module it imports again in every run: measured ~0.1 s of a one-rank
    merge (imports 0.17-0.18 -> 0.07 s), which is no cost of tokentrace's."""
    compileall.compile_dir(ROOT / "tokentrace", quiet=1)


def run_measured(command: list[str], cwd: Path | None = None, env: dict | None = None) -> dict:
    """Runs ``command``; wall seconds, CPU seconds of it and its (waited-for) descendants, peak
    tree RSS (every 20 ms), peak tree PSS (every 100 ms) and max single RSS (MiB), its stdout."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        peak = peak_pss = tick = 0
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            pids = _tree_pids(process.pid)
            peak = max(peak, _tree_rss(pids))
            if tick % 5 == 0:
                peak_pss = max(peak_pss, _tree_pss(pids))
            tick += 1
            time.sleep(0.02)
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    if process.returncode:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{text[-3000:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "tree_mib": peak / 2**20,
            "pss_mib": peak_pss / 2**20, "max_mib": usage.ru_maxrss / 1024, "out": text}


def make_profiles(source: Path, counts: list[int], work: Path) -> dict[int, Path]:
    """{N: folder of N ranks}: the largest written, the others hard links to its first ranks."""
    top = max(counts)
    full = work / f"ranks{top}"
    if not (full / "done").exists():
        shutil.rmtree(full, ignore_errors=True)
        replicate(source, full, ranks=top, profile_id="rep")
        (full / "done").touch()
    folders = {top: full}
    for n in counts:
        if n == top:
            continue
        folder = work / f"ranks{n}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for r in range(n):
            for path in full.glob(f"rep-TP{r}.*"):
                try:
                    os.link(path, folder / path.name)
                except OSError:
                    shutil.copy2(path, folder / path.name)
        folders[n] = folder
    return folders


def analyze_once(folder: Path, jobs: int | None, tmp: Path, sql: Path | None = None) -> dict:
    out = tmp / "analyze-out"
    shutil.rmtree(out, ignore_errors=True)
    code = CHILD_PATCH + "import sys; from tokentrace.cli import main; sys.argv[0] = 'tokentrace'; main()"
    command = [sys.executable, "-c", code, "analyze", str(folder), "-o", str(out)]
    command += ["--jobs", str(jobs)] if jobs else []
    cache = tmp / "user-cache"
    shutil.rmtree(cache, ignore_errors=True)
    env = fresh_cache(cache)
    if sql:  # the patch reaches analyze's worker processes too: they inherit the environment
        env.update({"TT_SQL_DIR": str(sql.resolve()), "TT_BENCH_DIR": str(Path(__file__).resolve().parent)})
    result = run_measured(command, env=env)
    laps = _LAPS_RE.search(result["out"])
    result["laps"] = tuple(float(x) for x in laps.groups()) if laps else None
    shutil.rmtree(out, ignore_errors=True)
    return result


def reference_once(reference: Path, folder: Path, n: int, tmp: Path) -> dict:
    out = tmp / "reference.json"
    command = [sys.executable, str(reference), "--all-ranks"]
    for r in range(n):
        command += ["--rank", str(r), str(folder / f"rep-TP{r}.viztracer.json"),
                    str(folder / f"rep-TP{r}.proton.chrome_trace")]
    command += ["-o", str(out)]
    result = run_measured(command, cwd=reference.parent)  # run in place, as the reference asks
    out.unlink(missing_ok=True)
    return result


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,8,16")
    parser.add_argument("--source", type=Path, default=find_set("t39_tp2"))
    parser.add_argument("--jobs", type=int, help="analyze --jobs (default: analyze's own, the cores)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--work", type=Path, help="keep (and reuse) the N-rank profiles here")
    parser.add_argument("--reference", type=Path, help="tokenspeed's tokenspeed_trace_merge.py "
                        "(default: $TOKENTRACE_BENCH_REFERENCE; none: its figures are skipped)")
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument("--sql", type=Path, help="another queries/ folder for analyze")
    args = parser.parse_args()
    counts = sorted(int(n) for n in args.ranks.split(","))
    compile_package()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        work = args.work or tmp
        start = time.perf_counter()
        folders = make_profiles(args.source, counts, work)
        size = sum(p.stat().st_size for p in folders[max(counts)].glob("rep-TP0.*"))
        print(f"{max(counts)} ranks from {args.source.name} written in {time.perf_counter() - start:.0f} s "
              f"({size / 1e6:.0f} MB of plain JSON per rank); {os.cpu_count()} cores, analyze --jobs "
              f"{args.jobs or 'default'}; medians of {args.repeat}", flush=True)
        print(f"{'ranks':>5} {'analyze s':>9} {'cpu s':>6} {'merge/queries/write s':>21} {'tree MiB':>8}"
              f" {'pss MiB':>7} {'max MiB':>7} {'ref merge s':>11} {'cpu s':>6} {'ref MiB':>7} {'analyze/ref':>11} {'cpu':>5}"
              f" {'target':>7}", flush=True)
        for n in counts:
            ours = [analyze_once(folders[n], args.jobs, tmp, args.sql) for _ in range(args.repeat)]
            laps = ours[len(ours) // 2]["laps"]
            laps_text = "/".join(f"{x:.1f}" for x in laps) if laps else "-"
            line = (f"{n:5d} {_median(ours, 'wall'):9.1f} {_median(ours, 'cpu'):6.1f} {laps_text:>21}"
                    f" {_median(ours, 'tree_mib'):8.0f} {_median(ours, 'pss_mib'):7.0f} {_median(ours, 'max_mib'):7.0f}")
            reference = None if args.skip_reference else reference_script(args.reference)
            if reference is not None:
                ref = [reference_once(reference, folders[n], n, tmp) for _ in range(args.repeat)]
                ratio = _median(ours, "wall") / _median(ref, "wall")
                cpu_ratio = _median(ours, "cpu") / _median(ref, "cpu")
                line += (f" {_median(ref, 'wall'):11.1f} {_median(ref, 'cpu'):6.1f} {_median(ref, 'tree_mib'):7.0f}"
                         f" {ratio:11.2f} {cpu_ratio:5.2f} {'met' if ratio <= 1 / 3 else 'missed':>7}")
            print(line, flush=True)


if __name__ == "__main__":
    main()
