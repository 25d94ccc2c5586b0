"""The notebook facade on the real sample (real Perfetto engine): folder -> cached merge,
one method per bundled query with typed columns, free SQL, deterministic close."""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import pytest

import tokentrace
from tokentrace.errors import EngineError, InputError, QueryError, TokentraceWarning
from tokentrace.merge import find_profile
from tokentrace.merge.cache import _first_writable, cache_key, merged_folder
from tokentrace.merge.cache_size import merged_root
from tokentrace.notebook import open_analysis
from tokentrace.options import MergeOptions


def test_open_is_lazy_and_is_the_facade():
    assert tokentrace.open is open_analysis
    with pytest.raises(AttributeError):
        tokentrace.no_such_thing  # noqa: B018


def test_folder_merge_is_cached_and_reused(analysis_t39, analyzed_t39):
    # rank by rank: the cache entry holds per-rank files and no combined file
    assert analysis_t39.merged.path is None and analysis_t39.trace_path == analysis_t39.merged.folder
    assert [p.name for p in analysis_t39.trace_paths] == ["sample-TP0.merged.json", "sample-TP1.merged.json"]
    # one host: anchors 1 ns apart, so both ranks are on the common axis as they are
    assert [t.shift_ns for t in analysis_t39.ranks.traces] == [0, 0]
    # the analyze run merged into the user cache (not into its output folder): reused here
    index = json.loads((analyzed_t39.output / "annotated" / "index.json").read_text())
    assert {Path(t["merged"]).parent.parent for t in index["traces"]} == {merged_root()}
    first = merged_folder(analyzed_t39.source, combined=False)
    assert first.reused and first.folder.parent == merged_root()
    before = [p.stat().st_mtime_ns for _, p, _ in first.ranks]
    again = merged_folder(analyzed_t39.source, combined=False)
    assert again.reused and [p.stat().st_mtime_ns for _, p, _ in again.ranks] == before


def test_cache_key_follows_inputs_and_options(sample_t39, tmp_path):
    copy = shutil.copytree(sample_t39, tmp_path / "profile")
    key = cache_key(find_profile(copy), MergeOptions())
    assert cache_key(find_profile(copy), MergeOptions(jobs=2)) == key          # parallelism changes nothing
    assert cache_key(find_profile(copy), MergeOptions(offset_us=5.0)) != key   # an option changes the merge
    viz = copy / "sample-TP0.viztracer.json.gz"
    os.utime(viz, ns=(viz.stat().st_atime_ns, viz.stat().st_mtime_ns + 1_000_000_000))
    assert cache_key(find_profile(copy), MergeOptions()) != key


def test_unwritable_cache_falls_back_to_the_next_folder(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    assert _first_writable([blocker / "cache", tmp_path / "user"]) == tmp_path / "user"
    with pytest.raises(InputError, match="cannot write a merge cache"):
        _first_writable([blocker / "cache"])


def test_kernel_summary_and_health_are_typed(analysis_t39):
    kernels = analysis_t39.kernel_summary()
    assert set(kernels["rank"]) == {"TP0", "TP1"}
    assert kernels.groupby("rank")["count"].sum().to_dict() == {"TP0": 2721, "TP1": 2721}
    assert str(kernels["total_dur_ns"].dtype) == "int64"
    assert len(analysis_t39.kernel_summary(name_glob="*rmsnorm*")) == 2
    health = analysis_t39.trace_health()
    assert health["align_method"].tolist() == ["anchors", "anchors"]
    assert health["stats_errors"].sum() == 0


def test_gpu_gaps_find_the_injected_stalls(analysis_t39):
    gaps = analysis_t39.gpu_gaps(min_gap_us=5000)
    per_rank = gaps.groupby("rank")["dur"].count().to_dict()
    # 4 injected 8 ms stalls per rank; plus the warm-up gap (JIT compilation) at the start.
    assert per_rank["TP0"] >= 4 and per_rank["TP1"] >= 4
    assert str(gaps["dur"].dtype) == "int64"
    assert set(analysis_t39.gpu_gaps(min_gap_us=5000, rank="TP1")["rank"]) == {"TP1"}


def test_host_stalls_name_host_stall_behind_the_8ms_gaps(analysis_t39):
    stalls = analysis_t39.host_stalls(top=3, min_gap_us=5000)
    leaf = stalls.sort_values("self_ns", ascending=False).drop_duplicates(["rank", "gap_index"])
    assert (leaf["function"] == "host_stall").sum() >= 8


def test_free_sql_run_and_gpu_windows(analysis_t39):
    count = analysis_t39.query("SELECT COUNT(*) AS n FROM slice WHERE category = 'kernel'")
    assert count.to_dict("list") == {"rank": ["TP0", "TP1"], "n": [2721, 2721]}  # per rank
    windows = analysis_t39.gpu_windows()
    assert windows["kernels"].tolist() == [2721, 2721]
    assert (windows["last_end_ts"] > windows["first_ts"]).all()
    assert (windows["busy_ns"] + windows["idle_ns"] == windows["active_ns"]).all()
    classes = windows[[f"idle_{c}_ns" for c in ("host_late", "launch_overhead", "gpu_queued",
                                                "no_link")]].sum(axis=1)
    assert (classes == windows["gap_idle_ns"]).all() and (windows["gap_idle_ns"] <= windows["idle_ns"]).all()
    with pytest.raises(QueryError):
        analysis_t39.run("kernel_summary", no_such_param=1)


def test_startup_gap_and_stall_profile(analysis_t39):
    gaps = analysis_t39.gpu_gaps(min_gap_us=2000)
    # Per rank: the start-up gap after the first kernel (CUPTI / lazy init), then 4 stalls.
    for _, rank_gaps in gaps.groupby("rank"):
        assert rank_gaps["phase"].tolist() == ["startup"] + ["steady"] * 4
        assert rank_gaps["kernels_before"].iloc[0] == 1
    default = analysis_t39.host_stall_profile(min_gap_us=2000)
    with_startup = analysis_t39.host_stall_profile(min_gap_us=2000, include_startup=True)
    first = default[default.frame_rank == 1]
    assert first["function"].tolist() == ["host_stall", "host_stall"]
    assert first["gaps"].tolist() == [4, 4]
    assert with_startup[with_startup.frame_rank == 1]["function"].tolist() == ["decode_loop"] * 2
    short = analysis_t39.host_stall_profile(max_gap_us=2000, host_only=True)
    assert (short["rank_gaps"] > 100).all()  # many short host-caused gaps per rank
    assert short[short.frame_rank == 1]["function"].tolist() == ["tokenize_requests"] * 2


def test_context_manager_closes_the_engine(analyzed_t39):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TokentraceWarning)
        with open_analysis(analyzed_t39.source, cache_dir=analyzed_t39.output / "merged") as t:
            assert len(t.trace_health()) == 2
    with pytest.raises(EngineError, match="closed"):
        t.query("SELECT 1")
    with pytest.raises(EngineError, match="closed"):
        t.gpu_gaps()


def test_raw_trace_file_and_bad_inputs(sample_t39, tmp_path):
    # Unmerged, Perfetto drops the 4 kernels that overlap on one stream (the merge keeps them).
    with pytest.warns(TokentraceWarning, match="slice_drop_overlapping_complete_event 4"):
        raw = open_analysis(sample_t39 / "sample-TP1.proton.chrome_trace.gz")
    with raw:
        assert raw.merged is None
        assert raw.kernel_summary()["count"].sum() == 2721 - 4
    with pytest.raises(InputError, match="merge options"):
        open_analysis(sample_t39 / "sample-TP1.proton.chrome_trace.gz", merge=MergeOptions(offset_us=1.0))
    with pytest.raises(InputError, match="no such"):
        open_analysis(tmp_path / "missing")


def test_query_methods_take_the_headers_parameters_and_defaults(analysis_t39):
    from tokentrace.catalog import find_query

    for name in ("gpu_gaps", "host_stalls", "gap_causes", "host_stall_profile", "rank_summary",
                 "step_breakdown", "gpu_windows", "kernel_summary"):
        method = getattr(analysis_t39, name)
        for param in find_query(name).params:
            assert param.describe() in method.__doc__, (name, param.name)
    default = analysis_t39.gpu_gaps()
    assert default["dur"].min() >= find_query("gpu_gaps").param("min_gap_us").default * 1000
    assert len(analysis_t39.gpu_gaps(min_gap_us=5000)) < len(default)
    with pytest.raises(QueryError, match="no parameter stall_min_us"):
        analysis_t39.gpu_gaps(stall_min_us=1)


def test_opening_records_merge_and_load_time(analysis_t39, sample_t39):
    # a folder's ranks load when first queried; a file loads when opened
    assert set(analysis_t39.seconds) == {"merge"}
    with open_analysis(sample_t39 / "sample-TP1.proton.chrome_trace.gz", warn=False) as raw:
        assert set(raw.seconds) == {"merge", "load"}
    assert all(v >= 0 for v in analysis_t39.seconds.values())


def test_the_former_module_name_still_imports():
    import tokentrace.analysis
    import tokentrace.notebook

    assert tokentrace.analysis.Analysis is tokentrace.notebook.Analysis
    assert tokentrace.analysis.open_analysis is tokentrace.notebook.open_analysis
