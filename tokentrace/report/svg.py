"""SVG drawing for the report's charts (:mod:`tokentrace.report.charts`): a canvas that collects
elements as text, linear scales with round ticks, axes, legends, and a PNG encoder for the
heatmap's cells.

The report's figures are a few hundred to a few thousand rectangles from its small result
tables. Written as SVG text they cost milliseconds and the browser lays out the text; through
matplotlib each figure cost a layout and a rasterisation (about 1.7 CPU-s per ``analyze``,
more than any query). Rectangles of one colour are one ``<path>``, so a step breakdown of
thousands of bars stays a few ``path`` elements.
"""

from __future__ import annotations

import base64
import math
import struct
import zlib
from collections.abc import Iterable, Sequence
from html import escape

import numpy as np

FONT = "system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif"
TEXT_COLOR = "#222"
GRID_COLOR = "#e6e6e6"
AXIS_COLOR = "#888"

#: matplotlib's default colour cycle ("tab10"): one colour per rank or series.
SERIES_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                 "#7f7f7f", "#bcbd22", "#17becf")

#: ColorBrewer's nine "Reds" (matplotlib's ``Reds``): light = little, dark = much.
REDS = ((255, 245, 240), (254, 224, 210), (252, 187, 161), (252, 146, 114), (251, 106, 74),
        (239, 59, 44), (203, 24, 29), (165, 15, 21), (103, 0, 13))

#: A character's width as a share of the font size, for sizing margins before the browser lays
#: out the text (system-ui averages about 0.55; a little more leaves room).
CHAR_WIDTH = 0.6


def text_width(text: str, size: float) -> float:
    """About how wide ``text`` is drawn at ``size`` px."""
    return len(text) * size * CHAR_WIDTH


def series_color(index: int) -> str:
    """The ``index``-th colour of :data:`SERIES_COLORS`, cycling."""
    return SERIES_COLORS[index % len(SERIES_COLORS)]


def _num(value: float) -> str:
    """A coordinate: one decimal, no trailing zero."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


class Canvas:
    """One SVG image, ``width`` x ``height`` px, scaling down to its container's width."""

    def __init__(self, width: float, height: float, title: str) -> None:
        self.width, self.height = width, height
        self._parts = [f"<title>{escape(title)}</title>"]

    def rects(self, x: Sequence[float], y: Sequence[float], w: Sequence[float],
              h: Sequence[float], fill: str, opacity: float | None = None,
              title: str | None = None) -> None:
        """Rectangles of one colour as one path (``x, y`` their top-left corners)."""
        if not len(x):
            return
        d = "".join(f"M{_num(a)} {_num(b)}h{_num(c)}v{_num(e)}h{_num(-c)}z"
                    for a, b, c, e in zip(x, y, w, h))
        extra = f" fill-opacity='{opacity}'" if opacity is not None else ""
        tip = f"<title>{escape(title)}</title>" if title else ""
        self._parts.append(f"<path d='{d}' fill='{fill}'{extra}>{tip}</path>")

    def rect(self, x: float, y: float, w: float, h: float, fill: str,
             opacity: float | None = None, title: str | None = None) -> None:
        """One rectangle."""
        self.rects([x], [y], [w], [h], fill, opacity, title)

    def text(self, x: float, y: float, text: str, size: float = 11, anchor: str = "start",
             bold: bool = False, rotate: bool = False, color: str = TEXT_COLOR) -> None:
        """Text whose baseline's ``anchor`` point (start, middle, end) is at ``x, y``."""
        attrs = f"x='{_num(x)}' y='{_num(y)}' font-size='{size}' text-anchor='{anchor}' fill='{color}'"
        if bold:
            attrs += " font-weight='bold'"
        if rotate:
            attrs += f" transform='rotate(-90 {_num(x)} {_num(y)})'"
        self._parts.append(f"<text {attrs}>{escape(text)}</text>")

    def line(self, x1: float, y1: float, x2: float, y2: float, color: str = AXIS_COLOR,
             width: float = 1) -> None:
        """A straight line."""
        self._parts.append(f"<line x1='{_num(x1)}' y1='{_num(y1)}' x2='{_num(x2)}' y2='{_num(y2)}' "
                           f"stroke='{color}' stroke-width='{width}'/>")

    def polyline(self, xs: Iterable[float], ys: Iterable[float], color: str,
                 dots: bool = True) -> None:
        """A line through the points (NaN points left out), with a dot on each."""
        points = [(a, b) for a, b in zip(xs, ys) if not (math.isnan(a) or math.isnan(b))]
        if not points:
            return
        text = " ".join(f"{_num(a)},{_num(b)}" for a, b in points)
        self._parts.append(f"<polyline points='{text}' fill='none' stroke='{color}' stroke-width='1.5'/>")
        if dots:
            d = "".join(f"M{_num(a - 2)} {_num(b)}a2 2 0 1 0 4 0a2 2 0 1 0 -4 0" for a, b in points)
            self._parts.append(f"<path d='{d}' fill='{color}'/>")

    def image(self, x: float, y: float, w: float, h: float, png: bytes) -> None:
        """A PNG stretched over the box, its pixels kept sharp."""
        data = base64.b64encode(png).decode("ascii")
        self._parts.append(f"<image x='{_num(x)}' y='{_num(y)}' width='{_num(w)}' height='{_num(h)}' "
                           f"preserveAspectRatio='none' style='image-rendering:pixelated' "
                           f"href='data:image/png;base64,{data}'/>")

    def svg(self) -> str:
        """The image as SVG text (an element that also stands alone as a file)."""
        return (f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {_num(self.width)} "
                f"{_num(self.height)}' width='{_num(self.width)}' height='{_num(self.height)}' "
                f"font-family='{FONT}' style='max-width:100%;height:auto;background:#fff'>"
                + "".join(self._parts) + "</svg>\n")


def round_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """About ``count`` round values (1, 2 or 5 times a power of ten apart) from ``low`` to
    ``high``, both included when they are round."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low] if math.isfinite(low) else []
    raw = (high - low) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9) * step
    ticks, value = [], first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def tick_text(value: float) -> str:
    """A tick's label: ``5``, ``0.25``, ``1200``."""
    return f"{value:.6g}" if abs(value) < 1e6 else f"{value:.3g}"


class Scale:
    """A linear map from data values to pixels."""

    def __init__(self, low: float, high: float, start_px: float, end_px: float) -> None:
        if not high > low:
            high = low + 1
        self.low, self.high, self.start, self.end = low, high, start_px, end_px
        self._factor = (end_px - start_px) / (high - low)

    def __call__(self, value):
        return self.start + (np.asarray(value, dtype="float64") - self.low) * self._factor

    def length(self, value):
        """A data length (not a position) in px, always positive."""
        return np.abs(np.asarray(value, dtype="float64") * self._factor)

    def ticks(self, count: int = 6) -> list[float]:
        """Round values inside the scale."""
        return round_ticks(self.low, self.high, count)


def x_axis(canvas: Canvas, scale: Scale, y: float, label: str | None = None,
           grid_top: float | None = None, count: int = 8,
           labels: dict[float, str] | None = None) -> None:
    """Ticks and their values under ``y``; a faint grid up to ``grid_top``; the label below."""
    canvas.line(scale.start, y, scale.end, y)
    for value in (labels or dict.fromkeys(scale.ticks(count))):
        x = float(scale(value))
        if grid_top is not None:
            canvas.line(x, grid_top, x, y, GRID_COLOR)
        canvas.line(x, y, x, y + 4)
        canvas.text(x, y + 15, (labels or {}).get(value) or tick_text(value), 10, "middle")
    if label:
        canvas.text((scale.start + scale.end) / 2, y + 32, label, 11, "middle")


def y_axis(canvas: Canvas, scale: Scale, x: float, label: str | None = None,
           grid_right: float | None = None, count: int = 4) -> None:
    """Ticks and their values left of ``x``; a faint grid to ``grid_right``; the label turned."""
    canvas.line(x, scale.start, x, scale.end)
    for value in scale.ticks(count):
        y = float(scale(value))
        if grid_right is not None:
            canvas.line(x, y, grid_right, y, GRID_COLOR)
        canvas.line(x - 4, y, x, y)
        canvas.text(x - 6, y + 3.5, tick_text(value), 10, "end")
    if label:
        canvas.text(x - 40, (scale.start + scale.end) / 2, label, 11, "middle", rotate=True)


def _legend_places(items: Sequence[tuple[str, str]], x: float, y: float, right: float,
                   size: float) -> list[tuple[float, float]]:
    """Where each legend item goes (its swatch's left, its baseline): in rows from ``x, y``,
    wrapping at ``right``."""
    left, places = x, []
    for label, _ in items:
        width = 14 + text_width(label, size) + 12
        if x > left and x + width > right:
            x, y = left, y + size + 8
        places.append((x, y))
        x += width
    return places


def legend(canvas: Canvas, x: float, y: float, items: Sequence[tuple[str, str]],
           right: float, size: float = 10) -> None:
    """Colour swatches and labels in rows from ``x, y`` (the first row's baseline) wrapping at
    ``right``; :func:`legend_height` says how tall."""
    for (label, color), (at, baseline) in zip(items, _legend_places(items, x, y, right, size)):
        canvas.rect(at, baseline - size + 1, 10, size - 1, color)
        canvas.text(at + 14, baseline, label, size)


def legend_height(items: Sequence[tuple[str, str]], width: float, size: float = 10) -> float:
    """The height :func:`legend` takes for these items in ``width`` px."""
    places = _legend_places(items, 0, 0, width, size)
    return (places[-1][1] if places else 0) + size + 8


def reds(shares: np.ndarray) -> np.ndarray:
    """Colours (``uint8`` RGB) of shares in [0, 1] on :data:`REDS`; NaN is white."""
    table = np.asarray(REDS, dtype="float64")
    position = np.clip(np.nan_to_num(shares, nan=0.0), 0, 1) * (len(REDS) - 1)
    low = np.floor(position).astype(int).clip(0, len(REDS) - 2)
    part = (position - low)[..., None]
    rgb = table[low] * (1 - part) + table[low + 1] * part
    rgb[np.isnan(shares)] = 255
    return np.rint(rgb).astype("uint8")


def png_rgb(pixels: np.ndarray) -> bytes:
    """An RGB PNG of ``pixels`` (``height x width x 3``, ``uint8``)."""
    height, width = pixels.shape[:2]
    rows = np.concatenate([np.zeros((height, 1), "uint8"), pixels.reshape(height, width * 3)], axis=1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)) + chunk(b"IEND", b""))
