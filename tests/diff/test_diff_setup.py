"""Runs that are not like for like: HTA's TraceDiff control/test pair (``tests/data/peers/diff_hta__
trace_diff__*``: the first two ProfilerSteps of ``../shared/traces/peers/hta__trace_diff__*``, host
ops and unlinked runtime calls cut; an A100 rank 3 of 8 against a V100 rank 1 of 2). The verdict
leads with the GPUs and the world size, then the step time, then the idle; a step that got slower
trips ``--fail-on-regression``.

Exact figures computed from the two files' JSON alone (timestamps as decimals): ProfilerStep
windows (start to the next step's start; the last one its own duration) 75.516 and 76.940 ms
before, 100.343 and 122.149 ms after; GPU busy in them 60.1875 and 107.4275 ms per step; GPU
events 3150 and 4602, active 151.889 and 222.588 ms, idle 31.514 and 7.599 ms.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from tokentrace.diff import compare
from tokentrace.diff.setup import _cuda_version, _hip_version, gpu_text, read_setup, setup_line, short_gpu
from tokentrace.errors import TokentraceWarning
from tokentrace.merge.cache import merged_folder
from tokentrace.runtime.files import cache_root

pytestmark = pytest.mark.slow


def test_the_verdict_leads_with_the_gpus_then_the_step_time(hta_pair):
    run = hta_pair["forward"]
    lines = run.stdout.splitlines()
    assert lines[0] == "not like for like: A100 vs V100, world size 8 vs 2"
    assert lines[1] == ("TP3 vs TP1: step time p50 76.23 -> 111.25 ms (+45.9%), p90 76.80 -> 119.97 ms "
                        "(+56.2%); GPU busy per step 60.19 -> 107.43 ms (+78.5%); 2 -> 2 steps of ProfilerStep#N")
    assert lines[2].startswith("TP3 vs TP1: GPU idle 20.7% -> 3.4% of active time (-17.3 points); "
                               "31.51 -> 7.60 ms")
    assert "note: TP3 vs TP1: each run has one rank (TP3 before, TP1 after)" in run.stdout
    assert "recovered" not in run.stdout


def test_setup_and_step_tables_hold_the_exact_figures(hta_pair):
    tables = hta_pair["forward"].tables
    setup = tables["setup_diff"].set_index("fact")
    assert setup.loc["GPU", "before"] == "NVIDIA A100-PG509-200"
    assert setup.loc["GPU", "after"] == "Tesla V100-SXM2-16GB"
    assert setup.loc["world size", ["before", "after"]].tolist() == ["8", "2"]
    assert setup["same"].tolist() == [False, False, True, True]  # GPU, world size, profiler, step
    assert "CUDA driver" not in setup.index  # a 2022 trace states no versions: nothing said
    steps = tables["step_diff"].set_index("metric")
    assert steps.loc["step_p50_ns", ["before", "after"]].tolist() == [76_228_000, 111_246_000]
    assert steps.loc["step_p90_ns", ["before", "after"]].tolist() == [76_797_600, 119_968_400]
    assert steps.loc["busy_per_step_ns", ["before", "after"]].tolist() == [60_187_500, 107_427_500]
    rank = tables["rank_diff"].iloc[0]
    assert rank["rank"] == "TP3 vs TP1" and not rank["comparable"]
    assert (rank["before_kernels"], rank["after_kernels"]) == (3150, 4602)
    assert (rank["before_active_ns"], rank["before_idle_ns"]) == (151_889_000, 31_514_000)
    assert (rank["after_active_ns"], rank["after_idle_ns"]) == (222_588_000, 7_599_000)
    assert "What each run ran on" in tables["html"] and "Tesla V100-SXM2-16GB" in tables["html"]


def test_a_slower_step_is_a_regression(hta_pair):
    assert hta_pair["forward"].exit_code == 0, hta_pair["forward"].stderr  # +45.9 % < 50, idle fell
    strict = hta_pair["strict"]
    assert strict.exit_code == 3
    assert ("regression: TP3 vs TP1: step time p50 grew by 45.94 % (76.23 -> 111.25 ms, ProfilerStep#N), "
            "more than 45") in strict.stderr


def test_setup_is_read_from_folders_traces_and_merged_files(hta_pair):
    root = hta_pair["root"]
    assert read_setup(root / "control") == {"gpu": ["NVIDIA A100-PG509-200"], "world_size": 8}
    assert read_setup(root / "test" / "diff_hta__trace_diff__test__test.json.gz") == {"gpu": ["Tesla V100-SXM2-16GB"], "world_size": 2}
    # the diff's merge of the folder, in the user cache (found again: no new merge)
    with pytest.warns(TokentraceWarning, match="no host frames"):  # the merge's, told again
        merged = merged_folder(root / "test", combined=False)
    assert merged.reused and cache_root() / "merged" in merged.folder.parents
    assert read_setup(merged.ranks[0][1]) == {"gpu": ["Tesla V100-SXM2-16GB"], "world_size": 2}
    assert read_setup(root / "nowhere") == {}


def test_a_side_without_steps_falls_back_to_the_span_per_kernel(hta_pair, tmp_path):
    from tokentrace.diff import load_run
    from tokentrace.options import AnalyzeOptions

    root = hta_pair["root"]
    before, after = (load_run(root / side, AnalyzeOptions(), tmp_path / side) for side in ("control", "test"))
    tables = dict(after.tables)
    tables["rank_summary"] = tables["rank_summary"].assign(steps=0, step_name=None, step_source=None)
    tables["step_breakdown"] = tables["step_breakdown"].iloc[:0]
    result = compare(before, dataclasses.replace(after, tables=tables))
    assert result.verdict[0] == "not like for like: A100 vs V100, world size 8 vs 2, step ProfilerStep#N vs none"
    # 151.889 ms / 3150 = 48.22 µs; 222.588 ms / 4602 = 48.37 µs
    assert result.verdict[1] == ("TP3 vs TP1: no step on the after side; GPU active span per kernel 48.22 -> "
                                 "48.37 µs (+0.3%) (151.89 ms / 3150 -> 222.59 ms / 4602 kernels)")
    assert not any("step time p50 grew" in line for line in result.regressions(0))


def test_setup_helpers():
    assert short_gpu("NVIDIA A100-PG509-200") == "A100" and short_gpu("Tesla V100-SXM2-16GB") == "V100"
    assert short_gpu("AMD Instinct MI300X") == "MI300X" and short_gpu("NVIDIA H200") == "H200"
    # the same model on other boards: the full names tell them apart
    assert gpu_text(["NVIDIA A100-PG509-200"], ["NVIDIA A100-SXM4-80GB"]) == "A100-PG509-200"
    assert _cuda_version(12040) == "12.4" and _hip_version(60443483) == "6.4.43483"


def test_a_gpu_one_side_states_is_not_a_difference():
    """A run whose inputs state no GPU (Proton, VizTracer) against one that does: no GPU line."""
    facts = pd.DataFrame({"fact": ["GPU", "world size"], "before": [None, "2"], "after": ["NVIDIA H200", "2"],
                          "same": [None, True]}).astype({"same": "boolean"})
    assert setup_line(facts) == []
    assert setup_line(facts.assign(after=["NVIDIA H200", "4"], same=pd.array([None, False], dtype="boolean"))) == [
        "not like for like: world size 2 vs 4"]


def test_raw_trace_files_are_merged_first(hta_pair, diff_cli, tmp_path):
    """The two traces given as files: each merged (its rank from distributedInfo), the same verdict."""
    root = hta_pair["root"]
    run = diff_cli(root / "control" / "diff_hta__trace_diff__control__control.json.gz",
                   root / "test" / "diff_hta__trace_diff__test__test.json.gz", tmp_path / "out")
    assert run.exit_code == 0, run.stderr
    assert run.stdout.splitlines()[:3] == hta_pair["forward"].stdout.splitlines()[:3]
    assert run.tables["rank_diff"]["rank"].tolist() == ["TP3 vs TP1"]
    # each file merged through the user cache (found again: no new merge), not into -o
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["diff.html", "tables"]
    for side in ("control", "test"):
        with pytest.warns(TokentraceWarning, match="no host frames"):  # the merge's, told again
            merged = merged_folder(root / side / f"diff_hta__trace_diff__{side}__{side}.json.gz", combined=False)
        assert merged.reused and cache_root() / "merged" in merged.folder.parents
