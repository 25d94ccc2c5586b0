"""Plots of the stall analysis: drawing only. Every function takes DataFrames (bundled query rows
returned by :class:`tokentrace.notebook.Analysis`, or rows picked from them by
:mod:`tokentrace.report`) and returns a ``matplotlib.figure.Figure``; nothing here queries or
computes. Gap classes are drawn in the colours of :mod:`tokentrace.gap_classes`.

Figures are built without ``pyplot`` (no global state, no display needed); in Jupyter run
``%matplotlib inline`` once and a returned figure shows itself.

Example::

    from tokentrace.report import plots
    fig = plots.plot_stall_profile(trace.host_stall_profile())
    fig.savefig("stall_profile.png")
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tokentrace import gap_classes, idle_categories
from tokentrace.units import NS_PER_MS, format_ms

__all__ = ["plot_timeline", "plot_stall_profile", "plot_step_breakdown", "plot_rank_skew",
           "plot_idle_budget", "plot_idle_heatmap"]

BUSY_COLOR = "#2ca02c"


def _figure(width: float, height: float):
    """A new Figure (Agg canvas attached so ``savefig`` works anywhere)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("tokentrace plots need matplotlib: pip install 'matplotlib>=3.7' "
                          "(a dependency of tokentrace; reinstall with pip install tokentrace)"
                          ) from None
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _empty(fig, ax, title: str, why: str):
    ax.set_title(title)
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return fig


def plot_timeline(windows: pd.DataFrame, gaps: pd.DataFrame, label_min_ns: int = 2_000_000,
                  max_labels: int = 12):
    """One row per rank: the GPU's active window (busy) with its idle gaps coloured by class
    and the host frame behind the long ones written above them.

    Args:
        windows: ``rank, first_ts, last_end_ts`` (``gpu_windows`` rows).
        gaps: ``rank, ts, dur, gap_class`` (``gpu_gaps`` rows) and optionally ``label`` (text
            for long gaps: ``gap_causes`` rows).
        label_min_ns: gaps at least this long get their label.
        max_labels: at most this many labels per rank (the longest gaps).
    """
    ranks = list(windows["rank"])
    fig = _figure(14, 1.1 + 1.25 * max(len(ranks), 1))
    axes = fig.subplots(max(len(ranks), 1), 1, sharex=True, squeeze=False)[:, 0]
    title = "GPU busy and idle per rank (gaps coloured by class; label = host frame behind it)"
    if not ranks:
        return _empty(fig, axes[0], title, "no kernels in this trace")
    origin = int(windows["first_ts"].min())
    for ax, (_, window) in zip(axes, windows.iterrows()):
        rank_gaps = gaps[gaps["rank"] == window["rank"]]
        _draw_rank_row(ax, window, rank_gaps, origin, label_min_ns, max_labels)
    axes[0].set_title(title)
    axes[-1].set_xlabel("time since the first kernel (ms)")
    _class_legend(axes[0], ["busy"] + sorted(set(gaps["gap_class"])))
    return fig


def _draw_rank_row(ax, window, gaps, origin, label_min_ns, max_labels) -> None:
    start = (window["first_ts"] - origin) / NS_PER_MS
    length = (window["last_end_ts"] - window["first_ts"]) / NS_PER_MS
    ax.broken_barh([(start, length)], (0, 1), color=BUSY_COLOR, alpha=0.35)
    for gap_class, group in gaps.groupby("gap_class"):
        spans = [((ts - origin) / NS_PER_MS, dur / NS_PER_MS)
                 for ts, dur in zip(group["ts"], group["dur"])]
        ax.broken_barh(spans, (0, 1), color=gap_classes.color(gap_class))
    if "label" in gaps:
        long_gaps = gaps[gaps["dur"].astype("float64") >= label_min_ns]
        longest = long_gaps.sort_values("dur", ascending=False).head(max_labels)
        for _, gap in longest.iterrows():
            middle = (gap["ts"] + gap["dur"] / 2 - origin) / NS_PER_MS
            ax.text(middle, 1.08, f"{gap['label']}\n{format_ms(gap['dur'], digits=1)} ms",
                    ha="center", va="bottom", fontsize=7)
    ax.set_ylim(0, 1.9)
    ax.set_yticks([0.5], [str(window["rank"])])


def _class_legend(ax, classes) -> None:
    from matplotlib.patches import Patch
    handles = [Patch(color=BUSY_COLOR if c == "busy" else gap_classes.color(c),
                     alpha=0.35 if c == "busy" else 1.0,
                     label="GPU busy (gaps under the minimum included)" if c == "busy" else c)
               for c in classes]
    ax.legend(handles=handles, loc="upper right", fontsize=7, ncols=len(handles))


def plot_stall_profile(profile: pd.DataFrame, top: int = 15):
    """Horizontal bars: host functions by the GPU idle time they own (self time inside gaps),
    stacked per rank.

    Args:
        profile: ``host_stall_profile`` rows (``function, rank, self_ns``).
        top: how many functions (largest total first).
    """
    fig = _figure(10, 1.5 + 0.35 * min(top, max(profile["function"].nunique(), 1)))
    ax = fig.subplots()
    title = "Where the host was during the stalls: self time (all ranks; the causes are in the summary)"
    if profile.empty:
        return _empty(fig, ax, title, "no GPU gap overlaps a host frame")
    table = profile.pivot_table(index="function", columns="rank", values="self_ns",
                                aggfunc="sum", fill_value=0)
    table = table.loc[table.sum(axis=1).nlargest(top).index[::-1]] / NS_PER_MS
    left = pd.Series(0.0, index=table.index)
    for rank in table.columns:
        ax.barh(table.index, table[rank], left=left, label=str(rank))
        left += table[rank]
    ax.set_title(title)
    ax.set_xlabel("ms of self time inside the gaps, summed (a frame in many gaps is not their cause)")
    ax.legend(title="rank", fontsize=8)
    return fig


# The idle columns of step_breakdown, in the order they are stacked.
IDLE_PARTS = [(gap_classes.idle_column(c), c) for c in (*gap_classes.NAMES, gap_classes.SHORT_IDLE.name)]


def plot_step_breakdown(steps: pd.DataFrame):
    """Stacked bars per scheduler step and rank: GPU busy, then idle by gap class (ms).

    Args:
        steps: the ``step_breakdown`` query's rows.
    """
    ranks = list(dict.fromkeys(steps["rank"])) if not steps.empty else []
    fig = _figure(14, 1.2 + 2.2 * max(len(ranks), 1))
    axes = fig.subplots(max(len(ranks), 1), 1, sharex=True, squeeze=False)[:, 0]
    title = "Per step: GPU busy and idle by class"
    if not ranks:
        return _empty(fig, axes[0], title, "no steps found (step_name matched no slice)")
    for ax, rank in zip(axes, ranks):
        rows = steps[steps["rank"] == rank].sort_values("step_index")
        bottom = pd.Series(0.0, index=rows.index)
        parts = [("gpu_busy_ns", "busy", BUSY_COLOR)] + [
            (col, name, gap_classes.color(name)) for col, name in IDLE_PARTS if col in rows]
        for column, name, color in parts:
            height = rows[column].astype("float64").fillna(0) / NS_PER_MS
            _bars(ax, rows["step_index"], height, bottom, color, name)
            bottom += height
        ax.set_ylabel(f"{rank}\nms")
    axes[0].set_title(title)
    axes[0].legend(fontsize=7, ncols=len(IDLE_PARTS) + 1, loc="upper right")
    axes[-1].set_xlabel("step index")
    return fig


def _bars(ax, at, size, base, color, label: str, thickness: float = 0.8,
          horizontal: bool = False) -> None:
    """What ``ax.bar(at, size, bottom=base, width=thickness, color=color, label=label)`` draws
    (``ax.barh(at, size, left=base, height=thickness, ...)`` if ``horizontal``), as one
    PolyCollection: ``bar`` makes a Rectangle artist per bar and updates the axes' data limits
    through its transforms for each, so its cost grows with the bars (ranks x steps x parts:
    thousands in a step breakdown) before anything is drawn. Same rectangles, colour, edges
    (none; line width 0, as a patch without an edge colour is drawn), zorder, data limits and
    sticky edges (each bar's base), so the PNG is the same (byte for byte on the sample traces;
    the axis-aligned edges snap to whole pixels, so the order the bars are drawn in does not
    show)."""
    from matplotlib.collections import PolyCollection

    low = np.asarray(at, dtype="float64") - thickness / 2
    high, start = low + thickness, np.asarray(base, dtype="float64")
    end = start + np.asarray(size, dtype="float64")
    corners = ((start, low), (end, low), (end, high), (start, high)) if horizontal else \
        ((low, start), (high, start), (high, end), (low, end))
    verts = np.stack([np.column_stack(corner) for corner in corners], axis=1)
    bars = PolyCollection(verts, facecolors=color, edgecolors="none", linewidths=0, label=label,
                          zorder=1)
    (bars.sticky_edges.x if horizontal else bars.sticky_edges.y).extend(start.tolist())
    ax.add_collection(bars)


def plot_idle_budget(budget: pd.DataFrame):
    """One stacked bar per rank: its GPU idle time split by ``idle_budget`` category (shares
    of the rank's idle, labelled with the ms they hold).

    Args:
        budget: the ``idle_budget`` query's rows.
    """
    ranks = list(dict.fromkeys(budget["rank"])) if not budget.empty else []
    fig = _figure(12, 1.4 + 0.5 * max(len(ranks), 1))
    ax = fig.subplots()
    title = "GPU idle per rank, by cause (share of the rank's idle time)"
    if not ranks:
        return _empty(fig, ax, title, "no GPU idle time")
    # one set of bars per category (:func:`_bars`), not a barh call per bar: barh's cost is per
    # bar, and a fleet has ranks x categories of them. The legend lists the categories in the
    # order they first occur, as it did with the label on a category's first bar.
    bars: dict[str, tuple[list, list, list]] = {}
    for row, (_, parts) in enumerate(budget.groupby("rank", sort=False)):
        left = 0.0
        for category, share, idle in zip(parts["category"], parts["share"], parts["idle_ns"]):
            share = float(share)
            for column, value in zip(bars.setdefault(category, ([], [], [])), (row, share, left)):
                column.append(value)
            if share >= 0.06:
                ax.text(left + share / 2, row, f"{format_ms(idle)} ms", ha="center",
                        va="center", fontsize=7)
            left += share
    for category, (rows, shares, lefts) in bars.items():
        _bars(ax, rows, shares, lefts, idle_categories.color(category), category,
              thickness=0.6, horizontal=True)
    ax.set_yticks(range(len(ranks)), ranks)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of GPU idle time in the active window")
    ax.set_title(title)
    ax.legend(fontsize=7, ncols=6, loc="upper center", bbox_to_anchor=(0.5, -0.35))
    return fig


def plot_rank_skew(skew: pd.DataFrame):
    """Per step: how far apart the ranks started and ended it (ms).

    Args:
        skew: the ``rank_skew`` query's rows.
    """
    fig = _figure(12, 3.6)
    ax = fig.subplots()
    title = "Rank skew per step"
    if skew.empty:
        return _empty(fig, ax, title, "fewer than two ranks share a step")
    rows = skew.sort_values("step_index")
    for column, label in (("start_skew_ns", "start skew"), ("end_skew_ns", "end skew")):
        ax.plot(rows["step_index"], rows[column].astype("float64") / NS_PER_MS, marker=".",
                label=label)
    ax.set_title(title + " (latest minus earliest rank)")
    ax.set_xlabel("step index")
    ax.set_ylabel("skew (ms)")
    ax.legend()
    return fig


def plot_idle_heatmap(steps: pd.DataFrame):
    """Rank x step: the GPU idle of each rank in each scheduler step (ms, darker = more idle),
    ranks sorted by their total idle, most idle on top: 64 ranks read at a glance.

    Args:
        steps: the ``step_breakdown`` query's rows (``rank, step_index, idle_ns``).
    """
    title = "GPU idle per rank and step (ms)"
    if steps.empty:
        fig = _figure(12, 2.5)
        return _empty(fig, fig.subplots(), title, "no steps found (step_name matched no slice)")
    grid = steps.pivot_table(index="rank", columns="step_index", values="idle_ns", aggfunc="sum")
    grid = grid.loc[grid.sum(axis=1).sort_values(ascending=False, kind="stable").index] / NS_PER_MS
    fig = _figure(14, 1.6 + 0.22 * len(grid))
    ax = fig.subplots()
    image = ax.imshow(grid.to_numpy(dtype="float64"), aspect="auto", cmap="Reds",
                      interpolation="nearest")
    ax.set_yticks(range(len(grid)), list(grid.index), fontsize=7 if len(grid) > 16 else 9)
    columns = list(grid.columns)
    ticks = range(0, len(columns), max(1, len(columns) // 20))
    ax.set_xticks(list(ticks), [str(columns[i]) for i in ticks])
    ax.set_xlabel("step index")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label="idle (ms)", shrink=0.8)
    return fig
