"""Plots drawn from real query results: titles, units, legends, and the injected stalls visible
(labelled `host_stall`) on the timeline and first in the stall profile."""

from __future__ import annotations

import pandas as pd
import pytest
from matplotlib.colors import to_hex

from tokentrace import gap_classes
from tokentrace.report import plots
from tokentrace.report.pipeline import compute_report_tables, run_report_queries


@pytest.fixture(scope="module")
def tables(analysis_t39):
    results, _, _ = run_report_queries(analysis_t39)  # the queries' defaults
    return results, compute_report_tables(results)


def test_timeline_labels_the_injected_stalls_per_rank(tables):
    results, _ = tables
    fig = plots.plot_timeline(results["gpu_windows"], results["gap_causes"])
    axes = fig.get_axes()
    assert [ax.get_yticklabels()[0].get_text() for ax in axes] == ["TP0", "TP1"]
    assert "ms" in axes[-1].get_xlabel() and axes[0].get_title()
    for ax in axes:
        stall_labels = [t for t in ax.texts if t.get_text().startswith("blocking: host_stall")]
        assert len(stall_labels) == 4
        assert [t for t in ax.texts if t.get_text().startswith("start-up: decode_loop")]
    legend = [t.get_text() for t in axes[0].get_legend().get_texts()]
    assert "host_late" in legend
    late = next(p for p, t in zip(axes[0].get_legend().get_patches(),
                                  axes[0].get_legend().get_texts()) if t.get_text() == "host_late")
    assert to_hex(late.get_facecolor()) == gap_classes.color("host_late")


def test_stall_profile_shows_host_stall_among_the_top(tables):
    results, _ = tables
    fig = plots.plot_stall_profile(results["host_stall_profile"])
    ax = fig.get_axes()[0]
    names = [t.get_text() for t in ax.get_yticklabels()]
    assert "host_stall" in names[-3:]  # barh: largest last; steady gaps only (no start-up)
    only_stalls = plots.plot_stall_profile(results["stall_causes"]).get_axes()[0]
    assert only_stalls.get_yticklabels()[-1].get_text() == "host_stall"
    assert "ms" in ax.get_xlabel() and ax.get_legend() is not None


def test_empty_inputs_draw_a_message_not_a_crash():
    empty = pd.DataFrame(columns=["function", "rank", "self_ns"])
    fig = plots.plot_stall_profile(empty)
    assert "no GPU gap" in fig.get_axes()[0].texts[0].get_text()
    skew = plots.plot_rank_skew(pd.DataFrame(columns=["step_index", "start_skew_ns",
                                                      "end_skew_ns"]))
    assert skew.get_axes()[0].texts


def test_step_breakdown_and_rank_skew_from_real_steps(analysis_t39):
    from tokentrace.catalog import list_queries
    if "step_breakdown" not in {s.name for s in list_queries()}:
        pytest.fail("queries/step_breakdown.sql is not bundled yet")
    steps = analysis_t39.step_breakdown()
    fig = plots.plot_step_breakdown(steps)
    assert len(fig.get_axes()) == steps["rank"].nunique() == 2
    assert "ms" in fig.get_axes()[0].get_ylabel()
    skew = plots.plot_rank_skew(analysis_t39.rank_skew())
    assert skew.get_axes()[0].get_lines()


def test_idle_budget_bars_fill_each_rank(tables):
    results, _ = tables
    fig = plots.plot_idle_budget(results["idle_budget"])
    ax = fig.get_axes()[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["TP0", "TP1"]
    widths = {}
    for bar in (path.get_extents() for bars in ax.collections for path in bars.get_paths()):
        row = round((bar.y0 + bar.y1) / 2)  # the bars: a PolyCollection per category
        widths[row] = widths.get(row, 0) + bar.width
    assert all(abs(w - 1) < 1e-6 for w in widths.values()) and len(widths) == 2
    assert "host_blocking" in [t.get_text() for t in ax.get_legend().get_texts()]
