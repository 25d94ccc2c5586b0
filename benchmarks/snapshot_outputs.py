"""Writes every merged output and every bundled query's rows for the real trace sets to a folder,
so two versions of tokentrace can be compared byte for byte (``diff -r A B``).

Usage: python benchmarks/snapshot_outputs.py OUT [SET ...] [--sql DIR] [--in-process]
       (default sets: tests/data/sample_t39_tp2 tests/data/sample_t36_tp2, and t39_tp2 t36_tp2
        from $TOKENTRACE_BENCH_SETS when it holds them: the recorded sets, examples/README.md)

Per set: each rank's merged file and the ``--combine`` file (as written), and for the combined
file every bundled query with its default parameters, as CSV (rows sorted as the SQL orders them).
Used once per restructuring: run it with the old and the new code and diff the folders.

``--sql DIR`` runs the queries of another copy of ``queries/`` (e.g. the committed one, to prove a
SQL change leaves every result as it was: run once with ``--sql`` the old copy, once without).
``--in-process``: one engine per merged file, the combined file *and each rank's file* (what
``analyze`` queries), every bundled query with its defaults plus the parameter sets of
``VARIANTS`` (``analyze``'s two ``host_stall_profile`` runs among them), and every public
``tt_*`` table of the ``tokentrace.*`` modules, each written with ``DataFrame.to_csv`` (query
results under ``<file>/queries/``, tables under ``<file>/tables/``). The merged files themselves
are not kept in this mode (their names are listed in ``merged.txt``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_data import DATA, sets_folder  # noqa: E402
from sql_dir import CHILD_PATCH, use_sql_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SETS = [DATA / "sample_t39_tp2", DATA / "sample_t36_tp2",
                *[(sets_folder() or DATA / "no-sets") / name for name in ("t39_tp2", "t36_tp2")]]
# (query, parameters) run besides every query's defaults in --in-process mode
VARIANTS = [
    ("host_stall_profile", {"min_gap_us": 2000, "host_only": True}),
    ("host_stall_profile", {"max_gap_us": 2000, "host_only": True}),
    ("host_stall_profile", {"include_startup": True}),
    ("gpu_gaps", {"min_gap_us": 0}),
    ("step_breakdown", {"min_gap_us": 0}),
    ("gap_causes", {"min_gap_us": 20, "stall_min_us": 500}),
    ("collective_wait", {"min_gap_us": 0}),
    ("idle_budget", {"min_gap_us": 20}),
    ("rank_summary", {"min_gap_us": 10, "stall_min_us": 1000}),
    ("host_stalls", {"top": 50}),
    # gaps below the modules' cached 100 µs: frames from both sources in one result
    ("host_stall_profile", {"min_gap_us": 50}),
    ("host_stalls", {"min_gap_us": 50, "top": 3}),
]
_TABLE_RE = re.compile(r"^CREATE PERFETTO TABLE (tt_\w+)", re.MULTILINE)


def _cli(sql: Path | None) -> tuple[list[str], dict]:
    code = CHILD_PATCH + "import sys; from tokentrace.cli import main; sys.argv[0] = 'tokentrace'; main()"
    env = dict(os.environ)
    if sql:
        env.update(TT_SQL_DIR=str(Path(sql).resolve()), TT_BENCH_DIR=str(Path(__file__).resolve().parent))
    return [sys.executable, "-c", code], env


def snapshot(folder: Path, out: Path, sql: Path | None = None) -> None:
    """Merges ``folder`` (per rank and combined) into ``out`` and writes each query's CSV."""
    out.mkdir(parents=True, exist_ok=True)
    cli, env = _cli(sql)
    subprocess.run([*cli, "merge", str(folder), "-o", str(out / "ranks")], check=True, env=env)
    combined = out / "combined.merged.json"
    subprocess.run([*cli, "merge", str(folder), "--combine", "-o", str(combined)], check=True, env=env)
    names = subprocess.run([*cli, "queries", "--names"], check=False, capture_output=True,
                           text=True, env=env).stdout.split()
    if not names:  # older CLIs have no --names: read the folder of bundled queries
        names = sorted(p.stem for p in ((sql or ROOT / "queries")).glob("*.sql"))
    for name in names:
        subprocess.run([*cli, "query", name, str(combined), "-o", str(out / f"{name}.csv")],
                       check=True, env=env)


def module_tables() -> list[str]:
    """The public tables of the bundled ``tokentrace.*`` modules, in module order."""
    from tokentrace.catalog import module_sources

    return [name for sql in module_sources().values() for name in _TABLE_RE.findall(sql)]


def snapshot_file(path: Path, out: Path) -> None:
    """Every query (defaults and ``VARIANTS``) and module table of one merged file, as CSV."""
    from tokentrace.catalog import list_queries, open_trace, run_query

    (out / "queries").mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    runs = [(spec.name, {}) for spec in list_queries()] + VARIANTS
    with open_trace(path, warn=False) as engine:
        for name, params in runs:
            label = name + "".join(f"-{k}={v}" for k, v in params.items())
            run_query(engine, name, params).to_csv(out / "queries" / f"{label}.csv", index=False)
        for table in module_tables():
            engine.query(f"SELECT * FROM {table}").to_csv(out / "tables" / f"{table}.csv", index=False)


def snapshot_in_process(folder: Path, out: Path) -> None:
    """Merges ``folder`` into a temporary folder and snapshots the combined and each rank's file."""
    cli, env = _cli(None)
    with tempfile.TemporaryDirectory() as tmp:
        ranks, combined = Path(tmp) / "ranks", Path(tmp) / "combined.merged.json"
        subprocess.run([*cli, "merge", str(folder), "-o", str(ranks)], check=True, env=env, capture_output=True)
        subprocess.run([*cli, "merge", str(folder), "--combine", "-o", str(combined)], check=True, env=env,
                       capture_output=True)
        files = [combined, *sorted(ranks.glob("*.merged.json"))]
        out.mkdir(parents=True, exist_ok=True)
        (out / "merged.txt").write_text("".join(f"{p.name}\n" for p in files))
        for path in files:
            print(f"  {path.name}", flush=True)
            snapshot_file(path, out / path.name.removesuffix(".merged.json"))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("sets", nargs="*", type=Path)
    parser.add_argument("--sql", type=Path, help="another queries/ folder to run")
    parser.add_argument("--in-process", action="store_true",
                        help="one engine per merged file (combined and each rank), variants, module tables")
    args = parser.parse_intermixed_args(argv)
    warnings.simplefilter("ignore")
    use_sql_dir(args.sql)
    for folder in args.sets or DEFAULT_SETS:
        if folder.is_dir():
            print(f"{folder.name} ...", flush=True)
            if args.in_process:
                snapshot_in_process(folder, args.out / folder.name)
            else:
                snapshot(folder, args.out / folder.name, args.sql)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
