"""The report with many ranks: every rank in the summary table (most idle first) and the
heatmap, the detail (cause lines, per-rank tables and plots) for the most idle ranks only. The
64 ranks are the real sample's query rows, copied under new rank tags with their idle scaled, so
the report layer is tested at fleet size without merging 64 traces."""

from __future__ import annotations

import re

import pandas as pd

from tokentrace.report.figures import write_plots
from tokentrace.report.html import write_report_html
from tokentrace.report.pipeline import REPORT_QUERIES, compute_report_tables
from tokentrace.report.tables import detail_ranks

N_RANKS = 64


def _fleet(tables_dir) -> dict[str, pd.DataFrame]:
    """The sample's rows for N_RANKS ranks: copy k of TP0/TP1 is rank TP<k>, its idle times k+1."""
    results = {}
    for name in [*REPORT_QUERIES, "stall_causes", "short_host_gaps"]:
        path = tables_dir / f"{name}.parquet"
        if not path.exists():
            continue
        rows = pd.read_parquet(path)
        if "rank" not in rows.columns:
            results[name] = rows
            continue
        copies = []
        for k in range(N_RANKS):
            copy = rows[rows["rank"] == f"TP{k % 2}"].copy()
            copy["rank"], copy["tp"] = f"TP{k}", k
            for column in ("idle_ns", "idle_host_late_ns", "top_idle_ns"):
                if column in copy:
                    copy[column] = copy[column] * (k + 1)
            copies.append(copy)
        results[name] = pd.concat(copies, ignore_index=True)
    return results


def test_64_ranks_read_in_one_table_and_the_worst_in_detail(analyzed_t39, tmp_path):
    results = _fleet(analyzed_t39.output / "tables")
    computed = compute_report_tables(results)
    summary = computed["summary"]
    assert len(summary) == N_RANKS and summary["idle_ns"].is_monotonic_decreasing
    detail = detail_ranks(summary, 8)
    most_idle = results["gpu_windows"].sort_values("idle_ns", ascending=False)["rank"].head(8)
    assert detail == most_idle.tolist() and "TP0" not in detail
    plots = write_plots(results, detail, tmp_path / "plots")
    assert {"idle_heatmap", "step_breakdown", "timeline"} <= set(plots)
    page = write_report_html(tmp_path / "report.html", "fleet", tmp_path, results, computed, plots,
                             [], [], detail).read_text(encoding="utf-8")
    assert page.count("<div class='cause'>") == 8
    assert "8 of 64 ranks in detail" in page
    summary_table = page.split("Per rank (most GPU idle first)</h2>", 1)[1].split("</table>", 1)[0]
    ranks_in_order = re.findall(r"<td>(TP\d+)</td>", summary_table)
    assert ranks_in_order == summary["rank"].tolist()
    stalls = page.split("Longest GPU gaps per rank</h2>", 1)[1].split("</table>", 1)[0]
    assert set(re.findall(r"<td>(TP\d+)</td>", stalls)) == set(detail)
    # each gap links to its moment in the UI `tokentrace view` serves (common-axis ts, selected)
    links = re.findall(r"<a href='http://127\.0\.0\.1:9001/#!/\?visStart=(\d+)&amp;visEnd=(\d+)&amp;ts=(\d+)&amp;dur=(\d+)'>", stalls)
    top = computed["top_stalls"]
    assert len(links) == len(top[top["rank"].isin(detail)]) > 0
    assert all(int(a) <= int(t) < int(t) + int(d) <= int(b) for a, b, t, d in links)
    assert "GPU idle per rank and step" in page
