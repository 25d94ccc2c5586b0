"""Trace health computed from facts, each rule on a real trace that triggers it: no Proton
anchor (the triton 3.6 sample: estimated, with its interval), no launch flows (hf_generate: Proton
without scopes), few flows and ranks recorded one after the other (engine_mixed), the torch
profiler alone (engine_kineto_stack: one clock, no anchors to claim), a hand-given offset, and a
VizTracer `min_duration` filter (the t39 sample with the short calls dropped as the filter drops
them: VizTracer writes no min_duration in its metadata). The clean t39 sample has none."""

from __future__ import annotations

import gzip
import json
import shutil
import warnings

import pytest

from support.paths import DATA
from tokentrace.catalog import open_trace, run_query
from tokentrace.errors import TokentraceWarning
from tokentrace.options import AlignMode, MergeOptions
from tokentrace.report.tables import health_summary, health_warnings, ranks_apart


def _health(merged_sets, name):
    _, _, engine = merged_sets(name)
    health = run_query(engine, "trace_health")
    return health, health_warnings(health)


def _merged_health(folder, cache, options=None):
    from tokentrace.merge import merged_folder

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TokentraceWarning)
        merged = merged_folder(folder, cache, options)
        engine = open_trace(merged.path, warn=False)
    try:
        return run_query(engine, "trace_health")
    finally:
        engine.close()


def test_clean_sample_has_no_problem_and_says_what_was_checked(merged_sets):
    health, found = _health(merged_sets, "sample_t39_tp2")
    assert found == []
    line = health_summary(health)
    assert line.startswith("No problems") and "clock anchors" in line
    assert "launches found for 100% of kernels" in line and "2 ranks ran at the same time" in line
    assert (health["overlapping_ranks"] == 1).all() and health["nearest_rank_ns"].isna().all()
    assert (health["host_min_dur_ns"] < 1000).all()


def test_no_anchor_says_estimated_with_its_interval(merged_sets):
    health, found = _health(merged_sets, "sample_t36_tp2")
    assert (health["align_method"] == "estimated").all()
    for _, row in health.iterrows():
        width = f"{row['offset_interval_ns'] / 1e3:.1f} µs"
        assert f"{row['rank']}: clocks aligned by estimate (no Proton anchor); uncertainty {width}" in found
    assert "anchors" not in health_summary(health)


def test_no_flows_is_said(merged_sets):
    health, found = _health(merged_sets, "hf_generate")
    row = health.iloc[0]
    assert row["kernels_with_flow"] == 0 and row["launch_coverage"] > 0.9
    assert [line for line in found if "have a launch flow" in line] == [
        f"TP0: only 0 of {row['kernels']} kernels (0%) have a launch flow (Proton draws one only "
        "for a launch inside a Proton scope, and for a CUDA-graph replay only to its first kernel); "
        f"the launches of "
        f"{row['launch_coverage']:.0%} were found from host calls (Triton launcher, CUDA-graph "
        "replay, the latest torch call): the launch times of those without a flow are bounds"]


def test_few_flows_and_ranks_that_never_overlapped(merged_sets):
    health, found = _health(merged_sets, "engine_mixed")
    assert (health["flow_coverage"] < 0.1).all() and (health["other_ranks"] == 1).all()
    # DP0 and DP1 were recorded one after the other, 10-12 s apart
    assert (health["overlapping_ranks"] == 0).all()
    assert health["nearest_rank_ns"].between(5e9, 15e9).all()
    for rank in ("DP0-TP0", "DP1-TP0"):
        assert sum(line.startswith(f"{rank}: only ") for line in found) == 1
        assert sum(line.startswith(f"{rank}: its GPU never ran at the same time") for line in found) == 1
    # ... so no cross-rank figure compares them
    _, _, engine = merged_sets("engine_mixed")
    for name in ("rank_skew", "collective_skew", "collective_wait"):
        assert run_query(engine, name).empty, name
    assert ranks_apart(health)


def test_ranks_that_ran_together_are_compared(merged_sets):
    health, _ = _health(merged_sets, "t39_tp2")
    assert not ranks_apart(health)
    _, _, engine = merged_sets("t39_tp2")
    skew = run_query(engine, "rank_skew")
    assert len(skew) >= 120 and (skew["n_ranks"] == 2).all()
    assert (run_query(engine, "collective_skew")["n_ranks"] == 2).all()


def test_torch_profiler_alone_is_one_clock(merged_sets):
    health, found = _health(merged_sets, "engine_kineto_stack")
    assert health["align_method"].tolist() == ["shared_clock"]
    assert found == []
    line = health_summary(health)
    assert "one clock (the torch profiler's)" in line and "anchors" not in line


@pytest.mark.slow
def test_hand_given_offset_is_said(tmp_path):
    health = _merged_health(DATA / "sample_t39_tp2", tmp_path / "cache",
                            MergeOptions(align=AlignMode.OFFSET, offset_us=72_199_646.584))
    found = health_warnings(health)
    assert (health["align_method"] == "offset").all()
    assert "TP0: clocks aligned by the offset given by hand (72199646.6 µs), not checked against " \
           "anchors or launches" in found


@pytest.mark.slow
@pytest.mark.parametrize("floor_us", [20, 100])
def test_min_duration_filter_is_found(tmp_path, floor_us):
    # VizTracer(min_duration=N) keeps only calls of at least N µs: the same cut of the sample.
    # 100 µs is tokenspeed's default (TOKENSPEED_VIZTRACER_MIN_DURATION_US unset): 2,075 of the
    # rank's 130,064 complete events kept.
    folder = tmp_path / "filtered"
    folder.mkdir()
    for path in (DATA / "sample_t39_tp2").glob("sample-TP0.*"):
        if path.name.startswith("sample-TP0.viztracer"):
            report = json.loads(gzip.decompress(path.read_bytes()))
            report["traceEvents"] = [e for e in report["traceEvents"]
                                     if e.get("ph") != "X" or e.get("dur", 0) >= floor_us]
            (folder / path.name).write_bytes(gzip.compress(json.dumps(report).encode()))
        else:
            shutil.copy(path, folder / path.name)
    health = _merged_health(folder, tmp_path / "cache")
    row = health.iloc[0]
    assert row["host_min_dur_ns"] >= floor_us * 1000 and row["host_slices"] > 1000
    (line,) = [t for t in health_warnings(health) if "min_duration" in t]
    assert line.startswith(f"TP0: no host call shorter than {floor_us} µs in ")
    # the setting that fixes it, VizTracer's and tokenspeed's, on the one line
    assert "VizTracer(min_duration=0)" in line and "TOKENSPEED_VIZTRACER_MIN_DURATION_US=0" in line
    assert "\n" not in line
