"""The report's SVG figures, drawn from the real sample's query rows: what `tokentrace analyze`
wrote is what `write_plots` draws from its tables, every gap and step is drawn, the injected
stalls are labelled, and the shares and heatmap cells are the tables' values."""

from __future__ import annotations

import base64
import gzip
import re
import zlib
from xml.etree import ElementTree

import numpy as np
import orjson
import pandas as pd
import pytest

from tokentrace.report import charts
from tokentrace.report.figures import write_plots
from tokentrace.report.pipeline import REPORT_QUERIES
from tokentrace.report.tables import detail_ranks

SVG = "{http://www.w3.org/2000/svg}"
NAMES = ["timeline", "stall_profile", "idle_budget", "idle_heatmap", "step_breakdown", "rank_skew"]


@pytest.fixture(scope="module")
def results(analyzed_t39):
    tables = analyzed_t39.output / "tables"
    return {name: pd.read_parquet(tables / f"{name}.parquet")
            for name in [*REPORT_QUERIES, "summary", "stall_causes"] if (tables / f"{name}.parquet").exists()}


def _svg(text: str) -> ElementTree.Element:
    root = ElementTree.fromstring(text)
    assert root.tag == f"{SVG}svg"
    return root


def _paths(root) -> dict[str, int]:
    """Each titled path's title and how many rectangles it draws."""
    return {path.find(f"{SVG}title").text: path.get("d").count("M")
            for path in root.iter(f"{SVG}path") if path.find(f"{SVG}title") is not None}


def _texts(root) -> list[str]:
    return [text.text for text in root.iter(f"{SVG}text")]


def test_analyze_wrote_what_write_plots_draws(analyzed_t39, results, tmp_path):
    detail = detail_ranks(results["summary"], 8)
    written = write_plots(results, detail, tmp_path / "plots")
    assert list(written) == NAMES
    for name, path in written.items():
        text = path.read_text(encoding="utf-8")
        _svg(text)  # a file of its own, as well as inlined in the report
        assert text == (analyzed_t39.output / "plots" / f"{name}.svg").read_text(encoding="utf-8"), name


def test_timeline_draws_every_gap_and_labels_the_injected_stalls(results, sample_t39):
    gaps = results["gap_causes"]
    root = _svg(charts.timeline(results["gpu_windows"], gaps))
    drawn = _paths(root)
    for (rank, gap_class), group in gaps.groupby(["rank", "gap_class"]):
        assert drawn[f"{rank}: {gap_class}, {len(group)} gaps"] == len(group)
    injected = sum(len(orjson.loads(gzip.decompress(path.read_bytes()))["stalls"])
                   for path in sample_t39.glob("*.truth.json.gz"))
    labels = [t for t in _texts(root) if t.startswith("blocking: host_stall")]
    assert len(labels) == injected == 8
    assert "host_late" in _texts(root) and "time since the first kernel (ms)" in _texts(root)


def test_stall_profile_puts_host_stall_among_the_top(results):
    root = _svg(charts.stall_profile(results["host_stall_profile"]))
    functions = [t for t in _texts(root) if t in set(results["host_stall_profile"]["function"])]
    assert "host_stall" in functions[:3]  # largest first; steady gaps only (no start-up)
    only_stalls = _texts(_svg(charts.stall_profile(results["stall_causes"])))
    assert [t for t in only_stalls if t in set(results["stall_causes"]["function"])][0] == "host_stall"


def test_idle_budget_bars_fill_each_rank(results):
    budget = results["idle_budget"]
    root = _svg(charts.idle_budget(budget))
    widths: dict[str, float] = {}
    for path in root.iter(f"{SVG}path"):
        title = path.find(f"{SVG}title")
        if title is not None:
            width = float(re.match(r"M[\d.]+ [\d.]+h([\d.]+)", path.get("d")).group(1))
            rank = title.text.split(":")[0]
            widths[rank] = widths.get(rank, 0) + width
    full = charts.WIDTH - charts.RIGHT - charts.LEFT
    assert set(widths) == set(budget["rank"]) and all(abs(w - full) < 0.5 for w in widths.values())
    assert "host_blocking" in _texts(root)


def test_step_breakdown_draws_each_step_of_each_rank(results):
    steps = results["step_breakdown"]
    drawn = _paths(_svg(charts.step_breakdown(steps)))
    for rank, rows in steps.groupby("rank"):
        assert drawn[f"{rank}: busy"] == drawn[f"{rank}: host_late"] == len(rows) == 40


def test_heatmap_cells_are_the_steps_idle(results):
    steps = results["step_breakdown"]
    root = _svg(charts.idle_heatmap(steps))
    png = base64.b64decode(next(root.iter(f"{SVG}image")).get("href").split(",", 1)[1])
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (steps["step_index"].nunique(), steps["rank"].nunique())
    data = zlib.decompress(png[png.index(b"IDAT") + 4:])
    pixels = np.frombuffer(data, "uint8").reshape(height, 1 + 3 * width)[:, 1:].reshape(height, width, 3)
    grid = steps.pivot_table(index="rank", columns="step_index", values="idle_ns", aggfunc="sum")
    grid = grid.loc[grid.sum(axis=1).sort_values(ascending=False, kind="stable").index]
    darkest = np.unravel_index(pixels.astype(int).sum(axis=2).argmin(), (height, width))
    assert darkest == np.unravel_index(grid.to_numpy().argmax(), grid.shape)
    ranks = [t for t in _texts(root) if t in set(steps["rank"])]
    assert ranks == list(grid.index)  # most idle on top


def test_empty_inputs_draw_a_message_not_a_crash():
    stalls = _texts(_svg(charts.stall_profile(pd.DataFrame(columns=["function", "rank", "self_ns"]))))
    assert any("no GPU gap" in t for t in stalls)
    skew = charts.rank_skew(pd.DataFrame(columns=["step_index", "start_skew_ns", "end_skew_ns"]))
    assert any("fewer than two ranks" in t for t in _texts(_svg(skew)))
    windows = pd.DataFrame(columns=["rank", "first_ts", "last_end_ts"])
    timeline = charts.timeline(windows, pd.DataFrame(columns=["rank", "ts", "dur", "gap_class"]))
    assert any("no kernels" in t for t in _texts(_svg(timeline)))


def test_missing_values_leave_no_nan_coordinate():
    skew = charts.rank_skew(pd.DataFrame({"step_index": [1, 2, 3], "start_skew_ns": [np.nan] * 3,
                                          "end_skew_ns": [np.nan, 2e6, 1e6]}))
    budget = charts.idle_budget(pd.DataFrame({"rank": ["a", "a"], "category": ["host_busy", "startup"],
                                              "share": [np.nan, 1.0], "idle_ns": [0, 5]}))
    heatmap = charts.idle_heatmap(pd.DataFrame({"rank": ["a", "b"], "step_index": [1, 2],
                                                "idle_ns": [5e6, np.nan]}))
    for text in (skew, budget, heatmap):
        _svg(text)
        assert "nan" not in text.lower()
