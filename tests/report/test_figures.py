"""The report's figures rendered in two processes are the bytes one process renders, and the
ones `tokentrace analyze` wrote, from the real sample's query rows."""

from __future__ import annotations

import subprocess
import sys

# In a fresh interpreter: this test process may run other tests' leftover threads, and with any
# thread alive write_plots renders in one process (a fork could inherit a held lock).
RENDER_BOTH = """
import sys
from pathlib import Path
import pandas as pd
from tokentrace.report import figures
from tokentrace.report.pipeline import REPORT_QUERIES
from tokentrace.report.tables import detail_ranks

tables, out = Path(sys.argv[1]), Path(sys.argv[2])
results = {name: pd.read_parquet(tables / f"{name}.parquet") for name in REPORT_QUERIES
           if (tables / f"{name}.parquet").exists()}
detail = detail_ranks(pd.read_parquet(tables / "summary.parquet"), 8)
assert figures.can_fork()  # the forked path is the one under test
serial = figures.write_plots(results, detail, out / "serial", jobs=1)
forked = figures.write_plots(results, detail, out / "forked", jobs=2)
with figures.FigureRenderer(2) as renderer:  # analyze's: forked before the rows exist
    early = renderer.write(results, detail, out / "early")
print(" ".join(serial), "|", " ".join(forked), "|", " ".join(early))
"""

KILLED = """
import os, signal, sys
from pathlib import Path
import pandas as pd
from tokentrace.errors import TokentraceError
from tokentrace.report import figures
from tokentrace.report.pipeline import REPORT_QUERIES

tables, out = Path(sys.argv[1]), Path(sys.argv[2])
results = {name: pd.read_parquet(tables / f"{name}.parquet") for name in REPORT_QUERIES
           if (tables / f"{name}.parquet").exists()}
with figures.FigureRenderer(2) as renderer:
    os.kill(renderer._child._pid, signal.SIGKILL)
    try:
        renderer.write(results, ["TP0"], out)
    except TokentraceError as exc:
        print(exc)
"""


def test_two_processes_render_the_bytes_of_one(analyzed_t39, tmp_path):
    done = subprocess.run([sys.executable, "-c", RENDER_BOTH, str(analyzed_t39.output / "tables"), str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    names = ["timeline", "stall_profile", "idle_budget", "idle_heatmap", "step_breakdown", "rank_skew"]
    assert done.stdout.split() == [*names, "|", *names, "|", *names]
    for name in names:
        png = (tmp_path / "serial" / f"{name}.png").read_bytes()
        assert png == (tmp_path / "forked" / f"{name}.png").read_bytes(), name
        assert png == (tmp_path / "early" / f"{name}.png").read_bytes(), name
        assert png == (analyzed_t39.output / "plots" / f"{name}.png").read_bytes(), name


def test_a_renderer_that_died_is_an_error_naming_it(analyzed_t39, tmp_path):
    done = subprocess.run([sys.executable, "-c", KILLED, str(analyzed_t39.output / "tables"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "drawing the report's figures" in done.stdout and "SIGKILL" in done.stdout
