"""``tokentrace diff`` on the recorded pair (tests/data/diff_serve_engine: sleep, busy and gc
stalls every 10th step, then none): the causes that went, the time recovered, the exit codes."""

from __future__ import annotations

import json

import pandas as pd
from typer.testing import CliRunner

from tokentrace.cli import app
from tokentrace.runtime.files import cache_root
from tokentrace.units import format_ms

GONE = {("gc", "collect_garbage"), ("busy", "detokenize_responses"), ("blocking", "flush_request_log")}


def test_the_removed_stall_causes_disappeared(serve_diffs):
    run = serve_diffs["forward"]
    assert run.exit_code == 0, run.stderr
    causes = run.tables["cause_diff"]
    gone = causes[causes["status"] == "disappeared"]
    assert GONE <= set(zip(gone["kind"], gone["function"]))
    for kind, function in GONE:
        row = gone[(gone["kind"] == kind) & (gone["function"] == function)].iloc[0]
        assert row["before_stalls"] == 2 and row["after_stalls"] == 0  # steps 9/39, 19/49, 29/59
        assert row["before_stall_idle_ns"] > 5_000_000 and row["after_idle_ns"] == 0
        assert row["before_frame"].startswith(function + " (")
    # the verdict names them, with their kinds, and the time the change recovered
    text = run.stdout
    for kind, function in GONE:
        assert f"{function} ({kind})" in text
    recovered = gone["before_idle_ns"].sum()
    assert f"TP0: recovered {format_ms(recovered)} ms of GPU idle" in text
    assert recovered > 300_000_000  # the two 157 ms gc stalls alone


def test_the_budget_categories_of_the_stalls_fall(serve_diffs):
    budget = serve_diffs["forward"].tables["idle_budget_diff"].set_index("category")
    for category in ("host_gc", "host_blocking"):
        assert budget.loc[category, "before_ns"] > 0 and budget.loc[category, "after_ns"] == 0
    assert budget.loc["host_busy", "delta_ns"] < 0
    assert (budget["delta_ns"] == budget["after_ns"] - budget["before_ns"]).all()
    assert budget["before_share"].sum() == pytest_approx(1) and budget["after_share"].sum() == pytest_approx(1)
    ranks = serve_diffs["forward"].tables["rank_diff"].iloc[0]
    assert ranks["before_idle_ns"] == budget["before_ns"].sum()
    assert ranks["after_idle_ns"] == budget["after_ns"].sum()
    assert ranks["delta_share_points"] < -20 and ranks["comparable"]
    assert "TP0: GPU idle 95.9% -> 59.7% of active time (-36.3 points)" in serve_diffs["forward"].stdout


def pytest_approx(value):
    import pytest

    return pytest.approx(value, abs=1e-9)


def test_after_to_before_is_a_regression(serve_diffs):
    run = serve_diffs["reverse"]
    assert run.exit_code == 3, (run.stdout, run.stderr)
    assert "regression: TP0: GPU idle share grew by" in run.stderr
    assert "new stall cause collect_garbage (gc)" in run.stderr
    appeared = run.tables["cause_diff"]
    assert GONE <= set(zip(appeared.loc[appeared["status"] == "appeared", "kind"],
                           appeared.loc[appeared["status"] == "appeared", "function"]))


def test_a_run_against_itself_changes_nothing(serve_diffs):
    run = serve_diffs["self"]
    assert run.exit_code == 0, run.stderr
    assert "regression" not in run.stderr
    for name in ("idle_budget_diff", "cause_diff", "kernel_diff"):
        table = run.tables[name]
        deltas = [c for c in table.columns if c.startswith("delta_")]
        assert len(table) and deltas
        assert (table[deltas].fillna(0) == 0).all().all(), name
    assert set(run.tables["cause_diff"]["status"]) == {"same"}
    assert set(run.tables["kernel_diff"]["status"]) == {"same"}
    assert (run.tables["step_diff"]["delta"].fillna(0) == 0).all()
    assert run.tables["rank_diff"]["delta_share_points"].tolist() == [0.0]
    assert "TP0: idle budget unchanged" in run.stdout


def test_kernels_are_matched_per_step(serve_diffs):
    kernels = serve_diffs["forward"].tables["kernel_diff"]
    both = kernels[kernels["status"].isin(["changed", "same"])]
    assert len(both) >= 5  # the same model ran: its kernels are in both runs
    # same model, same steps: counts per step agree for the decode kernels
    top = both.iloc[0]
    assert top["before_count_per_step"] > 0
    assert (both["delta_total_ns"] == both["after_total_ns"] - both["before_total_ns"]).all()
    steps = serve_diffs["forward"].tables["step_diff"].set_index("metric")
    assert steps.loc["steps", "before"] == steps.loc["steps", "after"] > 50
    assert steps.loc["step_p99_ns", "before"] > steps.loc["step_p99_ns", "after"]  # gc stalls gone


def test_diff_html_is_written_and_self_contained(serve_diffs):
    page = serve_diffs["forward"].tables["html"]
    assert page.startswith("<!DOCTYPE html>") and "collect_garbage" in page
    assert "http://" not in page and "https://" not in page and "<script" not in page


def test_analyze_output_gives_the_same_tables(serve_pair, serve_diffs, tmp_path):
    """An analyze output folder's tables are reused: diffed against its own profile folder,
    nothing changed."""
    before, _ = serve_pair
    result = CliRunner().invoke(app, ["analyze", str(before), "-o", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    run = CliRunner().invoke(app, ["diff", str(tmp_path / "a"), str(before), "-o", str(tmp_path / "d"),
                                   "--fail-on-regression", "0"])
    assert run.exit_code == 0, run.output
    budget = pd.read_parquet(tmp_path / "d" / "tables" / "idle_budget_diff.parquet")
    assert (budget["delta_ns"] == 0).all() and len(budget) > 3
    # it read the Parquet files: no merge of its own for the analyze folder; the profile
    # folder's merge is the one analyze cached in the user cache (none in -o, none beside it)
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["diff.html", "tables"]
    sources = {json.loads(m.read_text())["source"] for m in (cache_root() / "merged").glob("*/manifest.json")}
    assert str(before.resolve()) in sources and str((tmp_path / "a").resolve()) not in sources
    # without its tables it says what to do
    (tmp_path / "a" / "tables" / "gap_causes.parquet").unlink()
    run = CliRunner().invoke(app, ["diff", str(tmp_path / "a"), str(before), "-o", str(tmp_path / "e")])
    assert run.exit_code == 1
    assert run.stderr.count("error:") == 1 and "tables/gap_causes.parquet" in run.stderr


def test_a_missing_run_is_one_error_line(tmp_path):
    run = CliRunner().invoke(app, ["diff", str(tmp_path / "nope"), str(tmp_path), "-o", str(tmp_path / "o")])
    assert run.exit_code == 1
    assert run.stderr.startswith("error:") and run.stderr.count("\n") == 1


def test_progress_names_each_run_and_quiet_shows_none(serve_pair, serve_diffs, diff_cli, tmp_path):
    """One line per stage on standard error, each named after its run (the two runs' stages of
    one name are two lines), as analyze's; --quiet: none, the same verdict."""
    from tokentrace.cli.progress import PREFIX

    forward = serve_diffs["forward"]
    stages = [line[len(PREFIX):] for line in forward.stderr.splitlines() if line.startswith(PREFIX)]
    assert any(s.startswith("before: merging") for s in stages), forward.stderr
    assert any(s.startswith("after: merging") for s in stages), forward.stderr
    assert stages[-1].startswith("writing tables and diff.html: "), forward.stderr
    quiet = diff_cli(*serve_pair, tmp_path / "q", "--quiet")
    assert quiet.exit_code == 0 and PREFIX not in quiet.stderr, quiet.stderr
    assert quiet.stdout.splitlines()[:-1] == forward.stdout.splitlines()[:-1]  # all but the diff: path
