"""Report rendering at fleet size: plots and report.html for 2, 16 and 64 ranks.

Usage: python benchmarks/bench_report.py [--ranks 2,16,64]
The rows are the committed sample's query tables (``tokentrace analyze tests/data/sample_t39_tp2``,
run once into a temporary folder), copied under new rank tags (rank k = copy of TP<k % 2>, its
idle scaled by k + 1), so the report layer is measured alone: picking the tables, drawing the
plots, writing the page. Prints seconds and the page size per rank count.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pandas as pd

from tokentrace.errors import TokentraceWarning
from tokentrace.options import AnalyzeOptions
from tokentrace.report import analyze
from tokentrace.report.html import write_report_html
from tokentrace.report.pipeline import REPORT_QUERIES, _write_plots, compute_report_tables
from tokentrace.report.tables import detail_ranks

ROOT = Path(__file__).resolve().parents[1]


def fleet_tables(tables: Path, n_ranks: int) -> dict[str, pd.DataFrame]:
    """The sample's rows for ``n_ranks`` ranks (see the module docstring)."""
    results = {}
    for name in [*REPORT_QUERIES, "stall_causes", "short_host_gaps"]:
        path = tables / f"{name}.parquet"
        if not path.exists():
            continue
        rows = pd.read_parquet(path)
        if "rank" not in rows.columns:
            results[name] = rows
            continue
        copies = []
        for k in range(n_ranks):
            copy = rows[rows["rank"] == f"TP{k % 2}"].copy()
            copy["rank"], copy["tp"] = f"TP{k}", k
            for column in ("idle_ns", "top_idle_ns"):
                if column in copy:
                    copy[column] = copy[column] * (k + 1)
            copies.append(copy)
        results[name] = pd.concat(copies, ignore_index=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,16,64", help="comma-separated rank counts")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", TokentraceWarning)
        base = analyze(ROOT / "tests" / "data" / "sample_t39_tp2", Path(tmp) / "sample", AnalyzeOptions())
        print("ranks  tables_s  plots_s  html_s  total_s  report_MB")
        for n in (int(v) for v in args.ranks.split(",")):
            out = Path(tmp) / f"r{n}"
            start = time.perf_counter()
            results = fleet_tables(base.output / "tables", n)
            computed = compute_report_tables(results)
            detail = detail_ranks(computed["summary"], AnalyzeOptions().detail_ranks)
            picked = time.perf_counter()
            plots = _write_plots(results, detail, out / "plots")
            drawn = time.perf_counter()
            page = write_report_html(out / "report.html", "fleet", out, results, computed, plots, [], [], detail)
            done = time.perf_counter()
            print(f"{n:5d}  {picked - start:8.2f}  {drawn - picked:7.2f}  {done - drawn:6.2f}  "
                  f"{done - start:7.2f}  {page.stat().st_size / 1e6:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
