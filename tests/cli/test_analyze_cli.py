"""`tokentrace analyze` end to end on real traces: files written, the terminal summary names
`host_stall` as the top stall cause, the gaps cover the workload's own stall records."""

from __future__ import annotations

import gc
import gzip
import html
import json
import re

import pandas as pd
import pytest

from support.analysis_fixtures import run_analyze
from tokentrace.catalog import list_queries
from tokentrace.report import REPORT_QUERIES


def _top_causes(stdout: str) -> dict[str, str]:
    # (a rank's line leads with the idle category that costs most, then its top stall)
    return dict(re.findall(r"^(TP\d): (?:most GPU idle is [^;]*; )?top stall cause (\S+)(?: \([^)]*\))*:",
                           stdout, re.M))


@pytest.mark.parametrize("run", ["analyzed_t39", "analyzed_t36"])
def test_summary_names_host_stall_on_every_rank(run, request):
    result = request.getfixturevalue(run)
    assert result.exit_code == 0, result.stdout
    assert _top_causes(result.stdout) == {"TP0": "host_stall", "TP1": "host_stall"}
    assert "report:" in result.stdout


def test_analyze_gives_back_the_objects_it_kept_from_the_collector(analyzed_t39):
    # analyze freezes what exists when it starts (its forked children skip it); a notebook's
    # garbage made before the call must be collectable again afterwards
    assert analyzed_t39.exit_code == 0
    assert gc.get_freeze_count() == 0


def test_every_bundled_query_table_plot_and_report_is_written(analyzed_t39):
    out = analyzed_t39.output
    bundled = {spec.name for spec in list_queries()}
    for name in REPORT_QUERIES:
        assert (out / "tables" / f"{name}.parquet").is_file() == (name in bundled), name
    for name in ("summary", "gap_causes", "rank_summary", "top_stalls", "stall_causes",
                 "short_host_gaps", "gpu_windows"):
        assert (out / "tables" / f"{name}.parquet").is_file()
    for name in ("timeline", "stall_profile"):
        assert (out / "plots" / f"{name}.svg").stat().st_size > 3_000
    page = (out / "report.html").read_text(encoding="utf-8")
    figures = sorted((out / "plots").glob("*.svg"))
    assert len(figures) == 6 and page.count("<svg ") == len(figures)
    for figure in figures:  # each inlined as it was written
        assert figure.read_text(encoding="utf-8").strip() in page, figure.name
    assert "top stall cause host_stall" in page
    # no health problem on the sample: the line says what was checked, in report and console
    ok = ("No problems: Perfetto loaded every event; launches found for 100% of kernels (100% by "
          "launch flow); clocks aligned by the profilers' clock anchors; the 2 ranks ran at the same time")
    assert f"<div class='ok'>{html.escape(ok)}</div>" in page
    assert f"trace health: {ok}" in " ".join(analyzed_t39.stdout.split())
    # self-contained: no resource from elsewhere; the only URLs are the timeline links to the
    # UI `tokentrace view` serves on this machine (the figures' SVG namespace is a name, not
    # a resource)
    urls = re.findall(r"(?<!xmlns=')https?://[^'\" <>]+", page.split("<body>")[1])
    assert urls and all(u.startswith("http://127.0.0.1:9001/#!/?visStart=") for u in urls), urls[:3]


def test_summary_table_costs_match_the_injection(analyzed_t39):
    summary = pd.read_parquet(analyzed_t39.output / "tables" / "summary.parquet")
    causes = pd.read_parquet(analyzed_t39.output / "tables" / "stall_causes.parquet")
    for _, row in summary.iterrows():
        # 4 stalls of 8 ms (time.sleep) per rank, all caused by host_stall: the sleeps explain
        # 4 x 8 ms and a little more for wake-up of the ~9.5 ms GPU gaps over them
        assert row["top_gaps"] == 4 and row["stalls"] == 4 and row["steps"] == 40
        assert row["top_function"] == "host_stall" and row["top_kind"] == "blocking"
        assert row["top_stall_ns"] == row["stall_idle_ns"] and 32e6 <= row["top_idle_ns"] <= 36e6
        assert row["top_idle_per_step_ns"] == row["top_idle_ns"] // 40
        # the start-up gap (CUPTI / lazy init at the first launch) is reported, not a stall
        assert row["idle_startup_ns"] > 40e6
        # the sleep's own frame is also the frame with the most self time in the stalls
        first = causes[(causes["rank"] == row["rank"]) & (causes["frame_rank"] == 1)]
        assert first["function"].tolist() == [row["top_leaf_function"]]


def test_steps_found_without_a_step_scope(analyzed_t36):
    # triton 3.6 traces have no Proton scopes, so no `decode_step`: the step is found on the host
    # (serve_sim's scheduler_step, run once per launch), and the summary says so
    summary = pd.read_parquet(analyzed_t36.output / "tables" / "summary.parquet")
    assert (summary["steps"] == 40).all() and (summary["step_source"] == "auto").all()
    assert summary["step_name"].str.startswith("scheduler_step (").all()
    assert summary["top_idle_per_step_ns"].notna().all()
    assert "over 40 steps of scheduler_step (found:" in " ".join(analyzed_t36.stdout.split())


def test_unknown_step_name_is_a_warning_not_a_silence(merged_sets):
    from tokentrace.catalog import run_query
    from tokentrace.report.tables import step_warning

    _, _, engine = merged_sets("sample_t36_tp2")
    assert run_query(engine, "step_breakdown", {"step_name": "no_such_step"}).empty
    assert "no step named 'no_such_step' in this trace; pass --step-name" in step_warning("no_such_step")
    assert "no scheduler step found" in step_warning("")


def _truth_stalls(folder):
    for path in sorted(folder.glob("*.truth.json.gz")):
        rank = re.search(r"-(TP\d)\.", path.name).group(1)
        for stall in json.loads(gzip.open(path).read())["stalls"]:
            yield rank, stall["start_ns"], stall["end_ns"]


def test_each_recorded_stall_lies_in_a_gap_charged_to_host_stall(analyzed_t39):
    gaps = pd.read_parquet(analyzed_t39.output / "tables" / "gap_causes.parquet")
    found = 0
    for rank, start, end in _truth_stalls(analyzed_t39.source):
        mine = gaps[(gaps["rank"] == rank) & (gaps["unix_ts"] < end)
                    & (gaps["unix_ts"] + gaps["dur"] > start)]
        covered = (mine["unix_ts"] + mine["dur"]).clip(upper=end) - mine["unix_ts"].clip(lower=start)
        best = mine.loc[covered.idxmax()]
        assert covered.max() >= 0.8 * (end - start)
        assert best["cause_function"] == "host_stall" and best["is_stall"]
        assert best["phase"] == "steady" and best["label"] == "blocking: host_stall"
        assert best["cause_kind"] == "blocking" and best["cause_call"] == "time.sleep"
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


def test_help_shows_the_sql_headers_defaults():
    from typer.testing import CliRunner

    from tokentrace.cli import app

    text = " ".join(CliRunner().invoke(app, ["analyze", "--help"]).output.split())
    for shown in ("default: 100 µs, from gpu_gaps.sql", "default: 10 µs, from gpu_gaps.sql",
                  "default: 2000 µs, from rank_summary.sql",
                  "default: '', from step_breakdown.sql"):
        assert shown in text.replace("│ ", ""), shown
    assert "{default}" not in text


def test_query_defaults_agree_across_the_report_queries():
    # The report passes one value per option to every query declaring it; the queries that
    # declare a parameter must agree on its default (the CLI shows one of them).
    from tokentrace.catalog import find_query

    defaults: dict[str, set] = {}
    for name in REPORT_QUERIES:
        for param in find_query(name).params:
            defaults.setdefault(param.name, set()).add(param.default)
    from tokentrace.cli.analyze import QUERY_DEFAULTS
    for option in QUERY_DEFAULTS:
        assert len(defaults[option]) == 1, (option, defaults[option])
    assert len(defaults["startup_kernels"]) == 1


def test_cli_import_stays_light():
    # Reading the queries for --help must not make every command import pandas and the engine.
    import subprocess
    import sys

    code = "import sys, tokentrace.cli; print('pandas' in sys.modules, 'tokentrace.catalog' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_options_reach_the_queries(analyzed_t39, tmp_path):
    # the merge analyzed_t39 cached in the user cache is reused: no new merge
    result = run_analyze(analyzed_t39.source, tmp_path / "out", "--stall-min-us", "20000",
                         "--step-name", "no_such_step")
    assert result.exit_code == 0, result.stdout
    line = next(text for text in result.stdout.splitlines() if text.startswith("TP0: "))
    assert "; no host stall (no steady host-caused GPU gap is long enough)" in line
    assert "no step named 'no_such_step' in this trace" in result.stdout
    meta = pq_metadata(tmp_path / "out" / "tables" / "rank_summary.parquet")
    assert meta["parameters"]["stall_min_us"] == 20000
    assert meta["parameters"]["min_gap_us"] == 100  # left to the query's default


def pq_metadata(path) -> dict:
    import pyarrow.parquet as pq

    return json.loads(pq.read_schema(path).metadata[b"tokentrace"])


@pytest.mark.parametrize(("name", "causes"), [
    # torch profiler + VizTracer; the torch profiler alone (its Python stacks are the host)
    ("engine_kineto", ("flush_request_log", "blocking in time.sleep", "detokenize_responses")),
    ("engine_kineto_stack", ("flush_request_log", "blocking in sleep", "detokenize_responses")),
])
def test_torch_profiler_folders_are_analyzed(name, causes, shared_traces, tmp_path):
    folder = shared_traces / name
    if not folder.is_dir():
        pytest.skip(f"{folder} not present")
    result = run_analyze(folder, tmp_path / name)
    assert result.exit_code == 0, result.stdout
    assert _top_causes(result.stdout) == {"TP0": "flush_request_log"}
    line = next(text for text in result.stdout.splitlines()
                if text.startswith("TP0: ") and "top stall cause" in text)
    assert all(cause in line for cause in causes), line
    assert (tmp_path / name / "report.html").stat().st_size > 50_000
    health = pd.read_parquet(tmp_path / name / "tables" / "trace_health.parquet")
    assert health.gpu_format.tolist() == ["kineto"] and health.launch_coverage.tolist() == [1.0]
    assert health.stats_errors.tolist() == [0] and health.stats_data_loss.tolist() == [0]


def test_no_plots_writes_the_tables_and_report_without_figures(analyzed_t39, tmp_path):
    """`--no-plots` (scripts, CI): no figure drawn or embedded, the same tables and summary."""
    out = tmp_path / "np"  # the merge analyzed_t39 cached in the user cache is reused
    run = run_analyze(analyzed_t39.source, out, "--no-plots")
    assert run.exit_code == 0, run.stdout
    assert not (out / "plots").exists() and "<svg" not in (out / "report.html").read_text(encoding="utf-8")
    assert "top stall cause host_stall" in run.stdout
    for name in ("gap_causes", "idle_budget", "summary"):
        mine = pd.read_parquet(out / "tables" / f"{name}.parquet")
        theirs = pd.read_parquet(analyzed_t39.output / "tables" / f"{name}.parquet")
        pd.testing.assert_frame_equal(mine, theirs, check_dtype=False)


def test_one_merged_trace_is_analyzed_as_it_is(merged_t39, tmp_path):
    """A trace merged by `tokentrace merge --combine`: queried as it is, every rank."""
    run = run_analyze(merged_t39[0], tmp_path / "out", "--no-plots")
    assert run.exit_code == 0, run.stdout
    assert _top_causes(run.stdout) == {"TP0": "host_stall", "TP1": "host_stall"}
    refused = run_analyze(merged_t39[0], tmp_path / "refused", "--offset-us", "5")
    assert refused.exit_code == 1 and "is a merged trace, queried as it is" in refused.stdout


def test_one_torch_profiler_trace_is_merged_then_analyzed(shared_traces, tmp_path):
    trace = shared_traces / "engine_kineto_stack" / "engs-TP0.trace.json.gz"
    if not trace.is_file():
        pytest.skip(f"{trace} not present")
    run = run_analyze(trace, tmp_path / "out", "--no-plots")
    assert run.exit_code == 0, run.stdout
    assert _top_causes(run.stdout) == {"TP0": "flush_request_log"}
    # merged through the user cache: the output folder holds the outputs only
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["annotated", "report.html", "tables"]
