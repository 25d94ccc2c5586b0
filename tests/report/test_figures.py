"""The report's figures rendered in two processes are the bytes one process renders, and the
ones `tokentrace analyze` wrote, from the real sample's query rows."""

from __future__ import annotations

import pandas as pd

from tokentrace.report import figures
from tokentrace.report.pipeline import REPORT_QUERIES
from tokentrace.report.tables import detail_ranks


def _results(tables_dir) -> dict[str, pd.DataFrame]:
    return {name: pd.read_parquet(tables_dir / f"{name}.parquet") for name in REPORT_QUERIES
            if (tables_dir / f"{name}.parquet").exists()}


def test_two_processes_render_the_bytes_of_one(analyzed_t39, tmp_path):
    results = _results(analyzed_t39.output / "tables")
    detail = detail_ranks(pd.read_parquet(analyzed_t39.output / "tables" / "summary.parquet"), 8)
    # the forked path is the one under test: no other thread may run here
    assert figures._may_fork()
    serial = figures.write_plots(results, detail, tmp_path / "serial", jobs=1)
    forked = figures.write_plots(results, detail, tmp_path / "forked", jobs=2)
    assert list(serial) == list(forked) == ["timeline", "stall_profile", "idle_budget",
                                            "idle_heatmap", "step_breakdown", "rank_skew"]
    for name, png in serial.items():
        assert png.read_bytes() == forked[name].read_bytes(), name
        assert png.read_bytes() == (analyzed_t39.output / "plots" / f"{name}.png").read_bytes(), name
