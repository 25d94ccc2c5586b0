"""`tokentrace analyze` end to end on real traces: files written, the terminal summary names
`host_stall` as the top stall cause, the gaps cover the workload's own stall records."""

from __future__ import annotations

import gzip
import json
import re

import pandas as pd
import pytest

from support.analysis_fixtures import run_analyze
from tokentrace.catalog import list_queries
from tokentrace.report import REPORT_QUERIES


def _top_causes(stdout: str) -> dict[str, str]:
    return dict(re.findall(r"^(TP\d): top stall cause (\S+):", stdout, re.M))


@pytest.mark.parametrize("run", ["analyzed_t39", "analyzed_t36"])
def test_summary_names_host_stall_on_every_rank(run, request):
    result = request.getfixturevalue(run)
    assert result.exit_code == 0, result.stdout
    assert _top_causes(result.stdout) == {"TP0": "host_stall", "TP1": "host_stall"}
    assert "report:" in result.stdout


def test_every_bundled_query_table_plot_and_report_is_written(analyzed_t39):
    out = analyzed_t39.output
    bundled = {spec.name for spec in list_queries()}
    for name in REPORT_QUERIES:
        assert (out / "tables" / f"{name}.parquet").is_file() == (name in bundled), name
    for name in ("summary", "gap_attribution", "top_stalls", "stall_causes", "short_host_gaps",
                 "gpu_windows"):
        assert (out / "tables" / f"{name}.parquet").is_file()
    for name in ("timeline", "stall_profile"):
        assert (out / "plots" / f"{name}.png").stat().st_size > 10_000
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.count("data:image/png;base64,") == len(list((out / "plots").glob("*.png")))
    assert "top stall cause host_stall" in page and "http" not in page.split("<body>")[1]


def test_summary_table_costs_match_the_injection(analyzed_t39):
    summary = pd.read_parquet(analyzed_t39.output / "tables" / "summary.parquet")
    causes = pd.read_parquet(analyzed_t39.output / "tables" / "stall_causes.parquet")
    for _, row in summary.iterrows():
        # 4 stalls of 8 ms (time.sleep) per rank: 4 x 8 ms charged, a little more for wake-up.
        assert row["top_gaps"] == 4 and row["stalls"] == 4 and row["steps"] == 40
        assert 32e6 <= row["top_idle_ns"] <= 36e6
        assert row["top_idle_per_step_ns"] == row["top_idle_ns"] // 40
        # the start-up gap (CUPTI / lazy init at the first launch) is reported, not a stall
        assert row["idle_startup_ns"] > 40e6
        first = causes[(causes["rank"] == row["rank"]) & (causes["frame_rank"] == 1)]
        assert first["self_ns"].tolist() == [row["top_idle_ns"]]


def test_missing_step_name_is_a_warning_not_a_silence(analyzed_t36):
    # triton 3.6 traces have no Proton scopes: no `decode_step`
    assert "no step named 'decode_step' in this trace; pass --step-name" in analyzed_t36.stdout
    page = (analyzed_t36.output / "report.html").read_text(encoding="utf-8")
    assert "no step named &#x27;decode_step&#x27; in this trace" in page
    summary = pd.read_parquet(analyzed_t36.output / "tables" / "summary.parquet")
    assert (summary["steps"] == 0).all() and summary["top_idle_per_step_ns"].isna().all()


def _truth_stalls(folder):
    for path in sorted(folder.glob("*.truth.json.gz")):
        rank = re.search(r"-(TP\d)\.", path.name).group(1)
        for stall in json.loads(gzip.open(path).read())["stalls"]:
            yield rank, stall["start_ns"], stall["end_ns"]


def test_each_recorded_stall_lies_in_a_gap_charged_to_host_stall(analyzed_t39):
    gaps = pd.read_parquet(analyzed_t39.output / "tables" / "gap_attribution.parquet")
    found = 0
    for rank, start, end in _truth_stalls(analyzed_t39.source):
        mine = gaps[(gaps["rank"] == rank) & (gaps["unix_ts"] < end)
                    & (gaps["unix_ts"] + gaps["dur"] > start)]
        covered = (mine["unix_ts"] + mine["dur"]).clip(upper=end) - mine["unix_ts"].clip(lower=start)
        best = mine.loc[covered.idxmax()]
        assert covered.max() >= 0.8 * (end - start)
        assert best["cause_function"] == "host_stall" and best["is_stall"]
        assert best["phase"] == "steady" and best["label"] == "host_stall"
        found += 1
    assert found == 8


def test_rerun_reuses_the_merge(analyzed_t39):
    again = run_analyze(analyzed_t39.source, analyzed_t39.output)
    assert again.exit_code == 0
    assert re.search(r"merge 0\.\d s", again.stdout)


def test_bad_folder_is_one_line_and_exit_1(tmp_path):
    result = run_analyze(tmp_path / "missing", tmp_path / "out")
    assert result.exit_code == 1
    assert result.stdout.strip().count("\n") == 0 and "error:" in result.stdout


@pytest.mark.parametrize("name", ["t39_tp2", "t36_tp2"])
def test_shared_traces_write_the_report(name, shared_traces, tmp_path):
    result = run_analyze(shared_traces / name, tmp_path / name, "--jobs", "2")
    assert result.exit_code == 0, result.stdout
    assert _top_causes(result.stdout) == {"TP0": "host_stall", "TP1": "host_stall"}
    assert (tmp_path / name / "report.html").stat().st_size > 50_000
