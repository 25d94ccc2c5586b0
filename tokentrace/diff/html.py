"""``diff.html``: one self-contained page (inline CSS, no scripts, no images, no network): the
verdict, the notes, and each diff table with times in ms and a bar per change (red: more GPU
idle or time, green: less). Formatting only: every figure is a cell of the diff tables."""

from __future__ import annotations

import html
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from tokentrace.report.html import cell_text, short_frames
from tokentrace.runtime.files import write_bytes
from tokentrace.units import format_ms

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;
color:#222;max-width:1400px}
h1{font-size:24px}h2{font-size:19px;margin-top:32px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f0f3f7}
td:first-child,th:first-child{text-align:left}td.t{text-align:left}
.warn{background:#fff4e5;border-left:4px solid #ff9800;padding:6px 10px;margin:4px 0}
.line{font-size:15px;background:#eef3fb;border-left:4px solid #1f77b4;padding:6px 12px;margin:4px 0}
.bar{display:inline-block;height:11px;vertical-align:middle}
.up{background:#d62728}.down{background:#2ca02c}
code{background:#f4f4f4;padding:1px 4px}
"""
# Rows per rank shown of the cause and kernel tables (the Parquet files hold them all).
SHOWN_ROWS = 15


def write_diff_html(path: Path, result) -> Path:
    """Writes the page for a :class:`~tokentrace.diff.DiffResult`; returns its path."""
    notes = "".join(f"<div class='warn'>{_e(n)}</div>" for n in result.notes)
    parts = ["<h1>tokentrace diff: what changed in GPU idle?</h1>",
             f"<p>Before <code>{_e(result.before)}</code>, after <code>{_e(result.after)}</code>. "
             f"Written {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}. Times in ms; "
             "per step: divided by each run's own steps. Every row is in <code>tables/*.parquet</code>.</p>",
             notes, "".join(f"<div class='line'>{_e(line)}</div>" for line in result.verdict),
             "<h2>What each run ran on</h2>", _setup(result.setup_diff),
             "<h2>GPU idle per rank</h2>", _ranks(result.rank_diff),
             "<h2>Where the idle went (idle_budget, side by side)</h2>", _budget(result.idle_budget_diff),
             "<h2>Host causes of GPU gaps (steady, host-caused)</h2>", _causes(result.cause_diff),
             "<h2>Kernels (by short name)</h2>", _kernels(result.kernel_diff),
             "<h2>Steps</h2>", _steps(result.step_diff)]
    page = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>tokentrace diff"
            f"</title><style>{_CSS}</style></head><body>{''.join(parts)}</body></html>")
    return write_bytes(path, page.encode("utf-8"))


def _e(value) -> str:
    return html.escape(str(value))


def _ms(value) -> str:
    return format_ms(value)


def _signed(value) -> str:
    if value is None or pd.isna(value):
        return "-"
    return ("+" if value > 0 else "") + format_ms(value)


def _bar(value, scale) -> str:
    """A bar as wide as ``value`` / ``scale`` (up to 120 px), red when it grew."""
    if value is None or pd.isna(value) or not scale or value == 0:
        return ""
    width = max(1, round(120 * min(abs(value) / scale, 1)))
    return f"<span class='bar {'up' if value > 0 else 'down'}' style='width:{width}px'></span>"


def _table(head: list[str], rows: list[list[str]], text_columns: int = 1) -> str:
    if not rows:
        return "<p>No rows.</p>"
    cells = ["<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        cells.append("<tr>" + "".join(f"<td class='t'>{c}</td>" if i < text_columns else f"<td>{c}</td>"
                                      for i, c in enumerate(row)) + "</tr>")
    return f"<table>{''.join(cells)}</table>"


def _ranks(ranks: pd.DataFrame) -> str:
    rows = [[_e(r["rank"]), _e(r["status"]), _e(cell_text(r["before_gpu_format"])),
             _e(cell_text(r["after_gpu_format"])), _e(cell_text(r["before_step"])), _e(cell_text(r["after_step"])),
             _ms(r["before_idle_ns"]), _ms(r["after_idle_ns"]), _signed(r["delta_idle_ns"]),
             _share(r["before_idle_share"]), _share(r["after_idle_share"]),
             "-" if pd.isna(r["delta_share_points"]) else f"{r['delta_share_points']:+.1f}",
             _ms(r["before_idle_per_step_ns"]), _ms(r["after_idle_per_step_ns"])]
            for _, r in ranks.iterrows()]
    return _table(["rank", "in", "GPU profiler before", "after", "steps before", "after",
                   "idle before", "after", "change", "share before", "after", "points",
                   "per step before", "after"], rows, text_columns=6)


def _setup(facts: pd.DataFrame) -> str:
    rows = [[_e(r["fact"]), _e(cell_text(r["before"]) or "-"), _e(cell_text(r["after"]) or "-"),
             "-" if pd.isna(r["same"]) else "same" if r["same"] else "<b>differs</b>"]
            for _, r in facts.iterrows()]
    return _table(["fact", "before", "after", ""], rows, text_columns=4)


def _share(value) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.1%}"


def _budget(budget: pd.DataFrame) -> str:
    scale = budget["delta_ns"].abs().max() if not budget.empty else 0
    rows = [[_e(r["rank"]), _e(r["category"]), _ms(r["before_ns"]), _ms(r["after_ns"]),
             _signed(r["delta_ns"]) + " " + _bar(r["delta_ns"], scale), _share(r["before_share"]),
             _share(r["after_share"]), _ms(r["before_per_step_ns"]), _ms(r["after_per_step_ns"]),
             _signed(r["delta_per_step_ns"])]
            for _, r in budget.iterrows()]
    return _table(["rank", "category", "before", "after", "change", "share before", "after",
                   "per step before", "after", "change per step"], rows, text_columns=2)


def _causes(causes: pd.DataFrame) -> str:
    shown = causes.groupby("rank", sort=False).head(SHOWN_ROWS)
    scale = shown["delta_idle_ns"].abs().max() if not shown.empty else 0
    rows = [[_e(r["rank"]), _e(r["kind"]),
             f"<span title='{_e(cell_text(r['after_frame']) or cell_text(r['before_frame']))}'>{_e(r['function'])}</span>",
             _e(r["status"]), _e(short_frames(cell_text(r["before_frame"]))),
             _e(short_frames(cell_text(r["after_frame"]))), f"{r['before_gaps']} / {r['after_gaps']}",
             f"{r['before_stalls']} / {r['after_stalls']}", _ms(r["before_idle_ns"]), _ms(r["after_idle_ns"]),
             _signed(r["delta_idle_ns"]) + " " + _bar(r["delta_idle_ns"], scale),
             _signed(r["delta_idle_per_step_ns"])]
            for _, r in shown.iterrows()]
    return _table(["rank", "kind", "function", "status", "frame before", "frame after", "gaps",
                   "stalls", "idle before", "after", "change", "change per step"], rows, text_columns=6)


def _kernels(kernels: pd.DataFrame) -> str:
    shown = kernels.groupby("rank", sort=False).head(SHOWN_ROWS)
    rows = [[_e(r["rank"]), _e(r["kernel"]), _e(r["status"]), f"{r['before_count']} / {r['after_count']}",
             _ms(r["before_total_ns"]), _ms(r["after_total_ns"]), _signed(r["delta_total_ns"]),
             _us(r["before_mean_ns"]), _us(r["after_mean_ns"]), _signed(r["delta_total_per_step_ns"])]
            for _, r in shown.iterrows()]
    return _table(["rank", "kernel", "status", "count", "total before", "after", "change",
                   "mean before (µs)", "after (µs)", "change per step"], rows, text_columns=3)


def _us(value) -> str:
    return "-" if value is None or pd.isna(value) else f"{value / 1e3:.1f}"


def _steps(steps: pd.DataFrame) -> str:
    rows = [[_e(r["rank"]), _e(r["metric"]), *(_step_value(r["metric"], r[c]) for c in ("before", "after", "delta")),
             "-" if pd.isna(r["change"]) else f"{r['change']:+.1%}"]
            for _, r in steps.iterrows()]
    return _table(["rank", "metric", "before", "after", "change", "relative"], rows, text_columns=2)


def _step_value(metric: str, value) -> str:
    if value is None or pd.isna(value):
        return "-"
    return _ms(value) + " ms" if metric.endswith("_ns") else f"{value:g}"
