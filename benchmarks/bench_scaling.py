"""Is every bundled query linear in the trace size? A 1x/2x/4x sweep on replicated real ranks.

Usage: python benchmarks/bench_scaling.py [--set FOLDER:TAG ...] [--scales 1,2,4] [--work DIR]
                                          [--sql DIR] [--repeat N]
Default sets: t39_tp2:TP0 and engine_mixed:DP0-TP0 from $TOKENTRACE_BENCH_SETS (the recorded sets:
examples/README.md), else the committed sample_t39_tp2:TP0.

Per set and scale k, the rank is replicated k times in time (``replicate.py``: the events copied
k times, each copy shifted by the trace span, ids kept consistent; 1x is written by the same
tool), merged per rank (``tokentrace merge``: the per-rank file ``analyze`` queries) and loaded
once in the embedded engine. Timed, in the order ``analyze`` pays them on one rank:
* ``load``: loading the merged file;
* ``module X``: ``INCLUDE PERFETTO MODULE tokentrace.X`` in dependency order (each builds only its
  own tables: the ones it depends on are built already);
* each bundled query with its defaults, its modules built (the median of --repeat runs), with
  its row count;
* ``total``: modules + queries (what analyze spends in SQL on the rank, load excluded).
Times are the process's CPU seconds by default (``--clock cpu``: the embedded engine runs
in-process on one thread, and CPU time is what a 2-core machine shared with other jobs measures
reliably; ``--clock wall`` for wall seconds). The ratio is time(kmax) / (kmax / kmin *
time(kmin)): 1.00 is linear, the target is <= 1.15; rows over 1.15 whose kmax time is at least
0.1 s are flagged ``SUPERLINEAR``.
``--sql DIR`` runs another copy of ``queries/`` (e.g. the committed one: before/after a change);
``--work DIR`` keeps the replicated and merged files there and reuses them; ``--runs N`` loads
each file N times (a fresh engine each) and keeps each row's least time (noise on a shared
machine only ever adds time).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_data import DATA, sets_folder  # noqa: E402
from replicate import replicate  # noqa: E402
from sql_dir import use_sql_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODULES = ["ranks", "kernels", "launches", "gaps", "host_frames", "stalls", "causes", "steps"]
FLAG_RATIO, FLAG_MIN_S = 1.15, 0.1


def merged_rank(folder: Path, tag: str, times: int, work: Path) -> Path:
    """The per-rank merged file of ``folder``'s rank ``tag`` replicated ``times`` times."""
    name = f"{folder.name}-{tag}-x{times}"
    merged = work / name / "merged"
    done = list(merged.glob("*.merged.json")) if merged.is_dir() else []
    if done:
        return done[0]
    replicate(folder, work / name / "profile", tags=[tag], times=times)
    cli = [sys.executable, "-c", "import sys; from tokentrace.cli import main; sys.argv[0] = 'tokentrace'; main()"]
    subprocess.run([*cli, "merge", str(work / name / "profile"), "-o", str(merged)], check=True,
                   capture_output=True)
    return next(merged.glob("*.merged.json"))


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
_clock = time.process_time


def _timed(action) -> tuple[float, object]:
    start = _clock()
    result = action()
    return _clock() - start, result


def measure(path: Path, repeat: int) -> dict[str, tuple[float, int | None]]:
    """{row label: (seconds, rows)} for one merged file."""
    from tokentrace.catalog import list_queries, open_trace, run_query

    out: dict[str, tuple[float, int | None]] = {}
    start = _clock()
    with open_trace(path, warn=False) as engine:
        out["load"] = (_clock() - start, None)
        for module in MODULES:
            seconds, _ = _timed(lambda: engine.query(f"INCLUDE PERFETTO MODULE tokentrace.{module}"))
            out[f"module {module}"] = (seconds, None)
        for spec in list_queries():
            runs = [_timed(lambda: run_query(engine, spec)) for _ in range(repeat)]
            out[spec.name] = (statistics.median(s for s, _ in runs), len(runs[0][1]))
    out["total"] = (sum(s for k, (s, _) in out.items() if k != "load"), None)
    return out


def report(label: str, sizes: dict[int, int], results: dict[int, dict]) -> list[str]:
    scales = sorted(results)
    lo, hi = scales[0], scales[-1]
    lines = [f"{label}: " + ", ".join(f"{k}x {sizes[k] / 1e6:.0f} MB" for k in scales)
             + f" ({_clock.__name__.replace('_', ' ')} seconds)"]
    head = f"  {'':28}" + "".join(f"{f'{k}x s':>9}" for k in scales)
    head += f"{f'{hi}x/({hi // lo}*{lo}x)':>14}" + "".join(f"{f'rows {k}x':>10}" for k in scales)
    lines.append(head)
    for row in results[lo]:
        times = [results[k][row][0] for k in scales]
        ratio = times[-1] / (hi / lo * times[0]) if times[0] > 0 else float("nan")
        flag = "  SUPERLINEAR" if ratio > FLAG_RATIO and times[-1] >= FLAG_MIN_S else ""
        rows = "".join(f"{'' if results[k][row][1] is None else results[k][row][1]:>10}" for k in scales)
        lines.append(f"  {row:28}" + "".join(f"{t:9.2f}" for t in times) + f"{ratio:14.2f}" + rows + flag)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", dest="sets", metavar="FOLDER:TAG")
    parser.add_argument("--scales", default="1,2,4")
    parser.add_argument("--work", type=Path, help="keep (and reuse) replicated + merged files here")
    parser.add_argument("--sql", type=Path, help="another queries/ folder to run (default: the checkout's)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per query (median); default 1")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    parser.add_argument("--runs", type=int, default=1, help="fresh engines per file, least time kept")
    args = parser.parse_args()
    global _clock
    _clock = CLOCKS[args.clock]
    warnings.simplefilter("ignore")
    use_sql_dir(args.sql)
    shared = sets_folder()
    sets = args.sets or ([f"{shared / 't39_tp2'}:TP0", f"{shared / 'engine_mixed'}:DP0-TP0"]
                         if shared is not None else [f"{DATA / 'sample_t39_tp2'}:TP0"])
    scales = [int(s) for s in args.scales.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        for item in sets:
            folder, tag = item.rsplit(":", 1)
            results, sizes = {}, {}
            for k in scales:
                path = merged_rank(Path(folder), tag, k, work)
                sizes[k] = path.stat().st_size
                runs = [measure(path, args.repeat) for _ in range(args.runs)]
                results[k] = {row: min((run[row] for run in runs), key=lambda cell: cell[0]) for row in runs[0]}
            print("\n".join(report(f"{Path(folder).name} {tag}", sizes, results)), flush=True)


if __name__ == "__main__":
    main()
