"""One number per fact (issue 29): the idle categories the console and the report show are
``idle_budget``'s, they add up to each rank's GPU idle, every one shown is explained, and the
top cause's figures are the gap table's (the stalls' summed lengths, the part explained)."""

from __future__ import annotations

import re

import pandas as pd

from tokentrace import idle_categories
from tokentrace.catalog import find_query
from tokentrace.report.html import cause_sentence
from tokentrace.report.tables import budget_column
from tokentrace.units import format_ms


def test_names_are_the_category_column_doc_of_idle_budget():
    column = next(c for c in find_query("idle_budget").columns if c.name == "category")
    assert tuple(re.findall(r"`(\w+)`", column.doc)) == idle_categories.NAMES
    assert all(idle_categories.meaning(name) for name in idle_categories.NAMES)


def _tables(run) -> dict[str, pd.DataFrame]:
    folder = run.output / "tables"
    return {name: pd.read_parquet(folder / f"{name}.parquet")
            for name in ("summary", "idle_budget", "gap_causes")}


def test_the_categories_add_up_to_the_idle_everywhere_they_are_shown(analyzed_t39, analyzed_t36):
    for run in (analyzed_t39, analyzed_t36):
        tables = _tables(run)
        summary = tables["summary"]
        parts = summary[[budget_column(c) for c in idle_categories.NAMES]].sum(axis=1)
        assert (parts == summary["idle_ns"]).all(), run.source
        host = summary[[budget_column(c) for c in idle_categories.HOST_CAUSED]].sum(axis=1)
        assert (host == summary["host_caused_ns"]).all()
        for _, row in summary.iterrows():
            sentence = cause_sentence(row)
            # the sentence's "category X ms (S%)" parts: every category with idle, summing up
            shown = dict(re.findall(r"\b(\w+) (\d+\.\d\d) ms \(\d+%\)", sentence))
            held = {c: row[budget_column(c)] for c in idle_categories.NAMES if row[budget_column(c)] > 0}
            assert set(shown) == set(held), sentence
            assert abs(sum(float(v) for v in shown.values()) - row["idle_ns"] / 1e6) < 0.01 * len(shown)
            assert "(not counted)" not in sentence and "shorter host gaps" not in sentence


def test_the_top_cause_figures_are_the_gap_tables(analyzed_t39):
    tables = _tables(analyzed_t39)
    stalls = tables["gap_causes"][tables["gap_causes"]["is_stall"] == 1]
    for _, row in tables["summary"].iterrows():
        mine = stalls[(stalls["rank"] == row["rank"]) & (stalls["cause_function"] == row["top_function"])
                      & (stalls["cause_kind"] == row["top_kind"])]
        assert row["top_stall_ns"] == mine["dur"].sum() and row["top_idle_ns"] == mine["cause_ns"].sum()
        sentence = cause_sentence(row)
        assert (f"explains {format_ms(row['top_idle_ns'])} ms of the {format_ms(mine['dur'].sum())} ms "
                f"of GPU idle in {len(mine)} of the rank's {row['stalls']} stalls") in sentence


def test_every_category_shown_is_explained(analyzed_t39):
    out = analyzed_t39.stdout
    legend = next(line for line in out.splitlines() if line.startswith("idle by category: "))
    report = (analyzed_t39.output / "report.html").read_text(encoding="utf-8")
    summary = _tables(analyzed_t39)["summary"]
    for category in idle_categories.NAMES:
        if (summary[budget_column(category)] > 0).any():
            assert f"{category}: {idle_categories.meaning(category)}" in legend
            assert f"{category} (ms)</th>" in report and f"{category}: " in report
        else:
            assert f"{category}:" not in legend
