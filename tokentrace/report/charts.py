"""The report's figures as SVG text, drawn from the query rows (:mod:`tokentrace.report.svg`).

Each function takes the rows its matplotlib twin in :mod:`tokentrace.report.plots` takes (the
notebook's figures) and draws the same picture: the same marks, colours, labels and order (the
timeline leaves out a gap label that would cover two others; matplotlib drew them over each
other). Nothing here queries or computes an analysis.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tokentrace import gap_classes, idle_categories
from tokentrace.report.plots import BUSY_COLOR, IDLE_PARTS
from tokentrace.report.svg import (
    Canvas,
    Scale,
    legend,
    legend_height,
    png_rgb,
    reds,
    series_color,
    text_width,
    x_axis,
    y_axis,
)
from tokentrace.units import NS_PER_MS, format_ms

__all__ = ["timeline", "stall_profile", "step_breakdown", "rank_skew", "idle_budget", "idle_heatmap"]

WIDTH = 1200
LEFT, RIGHT = 70, 20  # the plot area's margins (px): tick values and labels, then air


def _empty(title: str, why: str) -> str:
    canvas = Canvas(WIDTH, 90, title)
    canvas.text(WIDTH / 2, 22, title, 13, "middle", bold=True)
    canvas.text(WIDTH / 2, 60, why, 12, "middle")
    return canvas.svg()


def _header(canvas: Canvas, title: str, items: list[tuple[str, str]]) -> None:
    """The title and a legend under it, in the top :func:`_header_height` px."""
    canvas.text(WIDTH / 2, 22, title, 13, "middle", bold=True)
    if items:
        legend(canvas, LEFT, 42, items, WIDTH - RIGHT)


def _header_height(items: list[tuple[str, str]]) -> float:
    return 42 + legend_height(items, WIDTH - RIGHT - LEFT) if items else 34


def _short(text: str, width: float, size: float) -> str:
    """``text`` cut to about ``width`` px, with an ellipsis when cut."""
    most = max(int(width / (size * 0.6)), 4)
    return text if len(text) <= most else text[:most - 1] + "…"


def timeline(windows: pd.DataFrame, gaps: pd.DataFrame, label_min_ns: int = 2_000_000,
             max_labels: int = 12) -> str:
    """One row per rank: the GPU's active window (busy) with its idle gaps coloured by class
    and the host frame behind the long ones written above them (``plot_timeline``)."""
    title = "GPU busy and idle per rank (gaps coloured by class; label = host frame behind it)"
    ranks = list(windows["rank"])
    if not ranks:
        return _empty(title, "no kernels in this trace")
    classes = sorted(set(gaps["gap_class"]))
    items = [("GPU busy (gaps under the minimum included)", BUSY_COLOR)] + \
            [(c, gap_classes.color(c)) for c in classes]
    row, bar = 86, 30  # each rank: labels above, then its bar
    top = _header_height(items)
    canvas = Canvas(WIDTH, top + row * len(ranks) + 44, title)
    _header(canvas, title, items)
    origin = int(windows["first_ts"].min())
    span = float((windows["last_end_ts"] - origin).max()) / NS_PER_MS
    x = Scale(0, span, LEFT, WIDTH - RIGHT)
    for index, (_, window) in enumerate(windows.iterrows()):
        y = top + row * index + row - bar
        start = (window["first_ts"] - origin) / NS_PER_MS
        canvas.rect(float(x(start)), y, float(x.length((window["last_end_ts"] - window["first_ts"]) / NS_PER_MS)),
                    bar, BUSY_COLOR, 0.35)
        canvas.text(LEFT - 6, y + bar / 2 + 4, str(window["rank"]), 11, "end")
        rank_gaps = gaps[gaps["rank"] == window["rank"]]
        for gap_class, group in rank_gaps.groupby("gap_class"):
            left = x((group["ts"].astype("float64") - origin) / NS_PER_MS)
            width = x.length(group["dur"].astype("float64") / NS_PER_MS).clip(min=0.5)  # each gap shows
            canvas.rects(left, [y] * len(group), width, [bar] * len(group), gap_classes.color(gap_class),
                         title=f"{window['rank']}: {gap_class}, {len(group)} gaps")
        if "label" in rank_gaps:
            _gap_labels(canvas, x, rank_gaps, origin, y, label_min_ns, max_labels)
    x_axis(canvas, x, top + row * len(ranks) + 2, "time since the first kernel (ms)")
    return canvas.svg()


def _gap_labels(canvas: Canvas, x: Scale, gaps: pd.DataFrame, origin: int, bar_top: float,
                label_min_ns: int, max_labels: int) -> None:
    """The longest gaps' labels above the bar, on two levels; one that would overlap both
    levels' labels is left out (the table under the figure has every gap)."""
    long_gaps = gaps[gaps["dur"].astype("float64") >= label_min_ns]
    placed: list[list[tuple[float, float]]] = [[], []]
    for _, gap in long_gaps.sort_values("dur", ascending=False).head(max_labels).iterrows():
        middle = float(x((gap["ts"] + gap["dur"] / 2 - origin) / NS_PER_MS))
        text = _short(str(gap["label"]), 220, 9)
        half = max(text_width(text, 9), 40) / 2
        at = min(max(middle, half + 4), WIDTH - half - 4)  # the text inside the image
        for level, taken in enumerate(placed):
            if all(at + half < a or at - half > b for a, b in taken):
                taken.append((at - half, at + half))
                base = bar_top - 4 - 26 * level
                canvas.line(middle, bar_top, middle, base + 1, "#999", 0.6)
                canvas.text(at, base - 11, text, 9, "middle")
                canvas.text(at, base - 1, f"{format_ms(gap['dur'], digits=1)} ms", 9, "middle")
                break


def stall_profile(profile: pd.DataFrame, top: int = 15) -> str:
    """Horizontal bars: host functions by the GPU idle time they own (self time inside gaps),
    stacked per rank (``plot_stall_profile``)."""
    title = "Where the host was during the stalls: self time (all ranks; the causes are in the summary)"
    if profile.empty:
        return _empty(title, "no GPU gap overlaps a host frame")
    table = profile.pivot_table(index="function", columns="rank", values="self_ns",
                                aggfunc="sum", fill_value=0)
    table = table.loc[table.sum(axis=1).nlargest(top).index] / NS_PER_MS
    items = [(str(rank), series_color(i)) for i, rank in enumerate(table.columns)]
    names = [str(name) for name in table.index]
    left = min(max(text_width(name, 10) for name in names) + 12, WIDTH * 0.45)
    row = 22
    head = _header_height(items)
    canvas = Canvas(WIDTH, head + row * len(names) + 48, title)
    _header(canvas, title, items)
    x = Scale(0, float(table.sum(axis=1).max()), left, WIDTH - RIGHT)
    base = pd.Series(0.0, index=table.index)
    tops = [head + row * i + 3 for i in range(len(names))]
    for i, rank in enumerate(table.columns):
        canvas.rects(x(base), tops, x.length(table[rank]), [row - 6] * len(names), series_color(i),
                     title=f"rank {rank}")
        base += table[rank]
    for name, y in zip(names, tops):
        canvas.text(left - 6, y + row / 2 + 1, _short(name, left - 12, 10), 10, "end")
    x_axis(canvas, x, head + row * len(names) + 2,
           "ms of self time inside the gaps, summed (a frame in many gaps is not their cause)",
           grid_top=head)
    return canvas.svg()


def step_breakdown(steps: pd.DataFrame) -> str:
    """Stacked bars per scheduler step and rank: GPU busy, then idle by gap class (ms)
    (``plot_step_breakdown``)."""
    title = "Per step: GPU busy and idle by class"
    ranks = list(dict.fromkeys(steps["rank"])) if not steps.empty else []
    if not ranks:
        return _empty(title, "no steps found (step_name matched no slice)")
    parts = [("gpu_busy_ns", "busy", BUSY_COLOR)] + [
        (column, name, gap_classes.color(name)) for column, name in IDLE_PARTS if column in steps]
    items = [(name, color) for _, name, color in parts]
    panel, gap = 170, 26
    head = _header_height(items)
    canvas = Canvas(WIDTH, head + (panel + gap) * len(ranks) + 30, title)
    _header(canvas, title, items)
    x = Scale(float(steps["step_index"].min()) - 0.5, float(steps["step_index"].max()) + 0.5,
              LEFT, WIDTH - RIGHT)
    for index, rank in enumerate(ranks):
        rows = steps[steps["rank"] == rank].sort_values("step_index")
        heights = [rows[column].astype("float64").fillna(0).to_numpy() / NS_PER_MS for column, _, _ in parts]
        top = head + (panel + gap) * index
        y = Scale(0, max(float(sum(heights).max()), 1e-3) * 1.05, top + panel, top)
        y_axis(canvas, y, LEFT, f"{rank} (ms)", grid_right=WIDTH - RIGHT)
        width = float(x.length(0.8))
        lefts = x(rows["step_index"].astype("float64").to_numpy() - 0.4)
        bottom = 0.0
        for height, (_, name, color) in zip(heights, parts):
            canvas.rects(lefts, y(bottom + height), [width] * len(rows), y.length(height), color,
                         title=f"{rank}: {name}")
            bottom = bottom + height
        x_axis(canvas, x, top + panel, "step index" if index == len(ranks) - 1 else None, count=12)
    return canvas.svg()


def idle_budget(budget: pd.DataFrame) -> str:
    """One stacked bar per rank: its GPU idle time split by ``idle_budget`` category (shares
    of the rank's idle, labelled with the ms they hold) (``plot_idle_budget``)."""
    title = "GPU idle per rank, by cause (share of the rank's idle time)"
    ranks = list(dict.fromkeys(budget["rank"])) if not budget.empty else []
    if not ranks:
        return _empty(title, "no GPU idle time")
    items = [(c, idle_categories.color(c)) for c in dict.fromkeys(budget["category"])]
    row = 30
    head = _header_height(items)
    canvas = Canvas(WIDTH, head + row * len(ranks) + 48, title)
    _header(canvas, title, items)
    x = Scale(0, 1, LEFT, WIDTH - RIGHT)
    for index, (rank, parts) in enumerate(budget.groupby("rank", sort=False)):
        y, left = head + row * index + 4, 0.0
        canvas.text(LEFT - 6, y + row / 2 + 1, str(rank), 11, "end")
        for category, share, idle in zip(parts["category"], parts["share"], parts["idle_ns"]):
            share = float(share) if pd.notna(share) else 0.0
            canvas.rect(float(x(left)), y, float(x.length(share)), row - 8,
                        idle_categories.color(category), title=f"{rank}: {category}, {format_ms(idle)} ms")
            if share >= 0.06:
                canvas.text(float(x(left + share / 2)), y + row / 2, f"{format_ms(idle)} ms", 10, "middle")
            left += share
    x_axis(canvas, x, head + row * len(ranks) + 2, "share of GPU idle time in the active window")
    return canvas.svg()


def rank_skew(skew: pd.DataFrame) -> str:
    """Per step: how far apart the ranks started and ended it (ms) (``plot_rank_skew``)."""
    title = "Rank skew per step"
    if skew.empty:
        return _empty(title, "fewer than two ranks share a step")
    rows = skew.sort_values("step_index")
    series = [(label, rows[column].astype("float64").to_numpy() / NS_PER_MS, series_color(i))
              for i, (column, label) in enumerate((("start_skew_ns", "start skew"), ("end_skew_ns", "end skew")))]
    items = [(label, color) for label, _, color in series]
    head, height = _header_height(items), 240
    canvas = Canvas(WIDTH, head + height + 48, title + " (latest minus earliest rank)")
    _header(canvas, title + " (latest minus earliest rank)", items)
    steps = rows["step_index"].astype("float64").to_numpy()
    x = Scale(float(steps.min()), float(steps.max()), LEFT, WIDTH - RIGHT)
    highest = float(pd.Series(np.concatenate([values for _, values, _ in series])).max(skipna=True))
    y = Scale(0, highest * 1.05 if highest > 0 else 1, head + height, head)  # (NaN: no value)
    y_axis(canvas, y, LEFT, "skew (ms)", grid_right=WIDTH - RIGHT, count=5)
    for _, values, color in series:
        canvas.polyline(x(steps), y(values), color, dots=len(steps) <= 400)
    x_axis(canvas, x, head + height, "step index", count=12)
    return canvas.svg()


def idle_heatmap(steps: pd.DataFrame) -> str:
    """Rank x step: the GPU idle of each rank in each scheduler step (ms, darker = more idle),
    ranks sorted by their total idle, most idle on top (``plot_idle_heatmap``)."""
    title = "GPU idle per rank and step (ms)"
    if steps.empty:
        return _empty(title, "no steps found (step_name matched no slice)")
    grid = steps.pivot_table(index="rank", columns="step_index", values="idle_ns", aggfunc="sum")
    grid = grid.loc[grid.sum(axis=1).sort_values(ascending=False, kind="stable").index] / NS_PER_MS
    values = grid.to_numpy(dtype="float64")
    ranks, columns = [str(rank) for rank in grid.index], list(grid.columns)
    row = 14 if len(ranks) > 16 else 22
    left = min(max(text_width(rank, 10) for rank in ranks) + 12, 200)
    bar_room = 110  # the colour bar and its values, right of the cells
    height = row * len(ranks)
    canvas = Canvas(WIDTH, 40 + height + 48, title)
    canvas.text(WIDTH / 2, 22, title, 13, "middle", bold=True)
    highest = float(pd.Series(values.ravel()).max(skipna=True))
    scale_top = highest if highest > 0 else 1.0  # (NaN: no value)
    canvas.image(left, 40, WIDTH - RIGHT - bar_room - left, height, png_rgb(reds(values / scale_top)))
    for index, rank in enumerate(ranks):
        canvas.text(left - 6, 40 + row * index + row / 2 + 4, rank, 10 if row < 20 else 11, "end")
    x = Scale(-0.5, len(columns) - 0.5, left, WIDTH - RIGHT - bar_room)
    every = max(1, len(columns) // 20)
    x_axis(canvas, x, 40 + height, "step index",
           labels={float(i): str(columns[i]) for i in range(0, len(columns), every)})
    _colour_bar(canvas, WIDTH - RIGHT - bar_room + 24, 40, max(height, 60), scale_top)
    return canvas.svg()


def _colour_bar(canvas: Canvas, x: float, top: float, height: float, highest: float) -> None:
    """The heatmap's colours from 0 (bottom) to ``highest`` ms (top), with its values."""
    shares = np.linspace(1, 0, 64)[:, None]
    canvas.image(x, top, 14, height, png_rgb(reds(shares)))
    y = Scale(0, highest, top + height, top)
    for value in y.ticks(5):
        canvas.line(x + 14, float(y(value)), x + 18, float(y(value)))
        canvas.text(x + 21, float(y(value)) + 3.5, f"{value:g}", 10)
    canvas.text(x + 70, top + height / 2, "idle (ms)", 11, "middle", rotate=True)
