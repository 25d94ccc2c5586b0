"""The report's kernel table (kernel_summary rows, names demangled and shortened, the full name
in a tooltip), busy split (gpu_busy) and short gaps per step (idle_budget), on the real
sample sample_t39_tp2 (eager decode, one NCCL all-reduce per step)."""

from __future__ import annotations

import html
import re

import pytest

from tokentrace.report.html import cause_sentence
from tokentrace.report.kernel_names import demangle, display_name
from tokentrace.report.pipeline import compute_report_tables, run_report_queries


@pytest.fixture(scope="module")
def report(analysis_t39):
    results, _, skipped = run_report_queries(analysis_t39)
    assert skipped == []
    return results, compute_report_tables(results)


def test_kernel_table_is_the_top_kernel_summary_rows_with_readable_names(report):
    results, computed = report
    kernels, summary = computed["kernels"], results["kernel_summary"]
    assert kernels.groupby("rank").size().to_dict() == {"TP0": 12, "TP1": 12}
    for rank, rows in kernels.groupby("rank"):
        expected = summary[summary["rank"] == rank].head(12)
        assert rows["kernel"].tolist() == expected["kernel"].tolist()  # longest total first
        assert rows["total_dur_ns"].is_monotonic_decreasing
    assert (kernels["name"] == kernels["kernel"].map(display_name)).all()
    assert (kernels["demangled"] == kernels["kernel"].map(demangle)).all()
    assert not kernels["name"].str.startswith("_Z").any()
    mangled = kernels[kernels["kernel"].str.startswith("_Z")]
    assert len(mangled) > 0 and not mangled["demangled"].str.startswith("_Z").any()
    nccl = kernels[kernels["kernel_class"] == "nccl"]
    assert set(nccl["name"]) == {"ncclDevKernel_AllReduce_Sum_bf16_RING_LL"}
    assert nccl["count"].tolist() == [40, 40]  # one all-reduce per step


def test_summary_carries_busy_split_and_short_gaps_per_step(report):
    results, computed = report
    summary = computed["summary"].set_index("rank")
    busy = results["gpu_busy"].set_index("rank")
    budget = results["idle_budget"]
    short = budget[budget["category"] == "short_gaps"].set_index("rank")
    for rank in ("TP0", "TP1"):
        row = busy.loc[rank]
        assert summary.loc[rank, "busy_split"] == (
            f"compute {row.compute_share:.1%}, nccl {row.nccl_share:.1%}, memory {row.memory_share:.1%}")
        assert row.nccl_ns > 0 and row.compute_ns > 0
        assert summary.loc[rank, "short_gaps_per_step"] == short.loc[rank, "gaps_per_step"]
        assert summary.loc[rank, "short_idle_per_step_ns"] == short.loc[rank, "idle_per_step_ns"]
        assert short.loc[rank, "steps"] == 40
        line = cause_sentence(computed["summary"].reset_index(drop=True).iloc[0 if rank == "TP0" else 1])
        assert f"short_gaps {short.loc[rank, 'gaps_per_step']:.1f} gaps per step, " in line
        assert f"GPU busy: compute {row.compute_share:.1%}, nccl {row.nccl_share:.1%}" in line


def test_report_page_shows_kernels_and_busy_split(analyzed_t39):
    page = (analyzed_t39.output / "report.html").read_text(encoding="utf-8")
    assert "GPU busy time by class" in page and "Kernels with the most GPU time" in page
    full = html.escape("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
    assert f"<span title='{full}" in page and ">ncclDevKernel_AllReduce_Sum_bf16_RING_LL</span>" in page
    kernels = page[page.index("Kernels with the most GPU time"):]
    kernels = kernels[:kernels.index("<h2")] if "<h2" in kernels else kernels
    shown = re.findall(r"<span title='([^']*)'>([^<]*)</span>", kernels)
    assert len(shown) == 24 and not any(name.startswith("_Z") for _, name in shown)
    # the launch-latency table names its kernels the same way (not mangled)
    every = re.findall(r"<span title='([^']*)'>([^<]*)</span>", page)
    assert len(every) > len(shown) and not any(name.startswith("_Z") for _, name in every)
    assert any("\n(recorded as _Z" in html.unescape(title) for title, _ in shown)  # mangled names kept
    assert "per step, " in page and "GPU busy: compute " in page
