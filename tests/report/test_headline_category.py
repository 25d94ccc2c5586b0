"""The answer is led by what costs most (issue 44): each rank's line names the idle_budget
category holding most of its GPU idle, with its share and what costs most in it, before the top
stall; rank_summary carries that category, and report.html says the same."""

from __future__ import annotations

import pandas as pd
import pytest

from support.analysis_fixtures import run_analyze
from support.paths import DATA
from tokentrace.report.html import cause_sentence

pytestmark = pytest.mark.slow  # real traces

SGLANG = DATA / "peers" / "tracelens__sglang_decode__sglang_Qwen3-8B_decode.json.gz"


def _tables(output, *names):
    return [pd.read_parquet(output / "tables" / f"{name}.parquet") for name in names]


def test_each_rank_leads_with_its_costliest_category(analyzed_t39):
    summary, budget = _tables(analyzed_t39.output, "summary", "idle_budget")
    page = (analyzed_t39.output / "report.html").read_text(encoding="utf-8")
    for _, row in summary.iterrows():
        mine = budget[budget["rank"] == row["rank"]].sort_values(["idle_ns", "category"],
                                                                   ascending=[False, True])
        top = mine.iloc[0]
        assert (row["top_category"], row["top_category_ns"]) == (top["category"], top["idle_ns"])
        assert row["top_category_share"] == pytest.approx(top["idle_ns"] / mine["idle_ns"].sum())
        line = cause_sentence(row)
        assert line.startswith(f"{row['rank']}: most GPU idle is {top['category']}, ")
        # then the top stall: the injected sleep, in another category than the largest here
        assert line.index("most GPU idle") < line.index("top stall cause host_stall")
        assert line in analyzed_t39.stdout
        assert line.split(";")[0] in page


def test_a_gpu_side_wait_leads_where_it_costs_most(tmp_path):
    run = run_analyze(SGLANG, tmp_path / "out", "--no-plots")
    assert run.exit_code == 0, run.stdout
    line = next(text for text in run.stdout.splitlines() if text.startswith("TP0: "))
    assert line.startswith("TP0: most GPU idle is gpu_wait, 100% (463.30 of 463.98 ms): "
                           "hipStreamWaitEvent, on an event recorded before the trace began, the host "
                           "meanwhile in populate_from_forward_batch (hipMemcpyWithStream); no host stall")
