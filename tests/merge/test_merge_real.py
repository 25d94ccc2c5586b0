"""Acceptance of the merge on real traces, checked in Perfetto's own trace processor."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from support.trace_files import load_json
from tokentrace.catalog import open_trace
from tokentrace.errors import TokentraceWarning
from tokentrace.merge import merge
from tokentrace.options import AlignMode, MergeOptions

STATS_LOST = "SELECT name, value FROM stats WHERE severity IN ('error', 'data_loss') AND value > 0"


def proton_counts(path: Path) -> tuple[int, int]:
    events = load_json(path)["traceEvents"]
    return sum(e.get("cat") == "kernel" for e in events), sum(e.get("ph") == "f" for e in events)


def gpu_gaps(trace, gpu_pid: int) -> list[tuple[int, int]]:
    rows = trace.query(
        "SELECT s.ts, s.ts + s.dur AS end_ts FROM slice s JOIN thread_track tt ON s.track_id = tt.id "
        f"JOIN thread USING (utid) JOIN process USING (upid) WHERE s.category = 'kernel' AND pid = {gpu_pid} ORDER BY s.ts"
    )
    gaps, busy_end = [], None
    for start, end in zip(rows.ts, rows.end_ts):
        if busy_end is not None and start > busy_end:
            gaps.append((busy_end, start))
        busy_end = end if busy_end is None else max(busy_end, end)
    return gaps


def assert_rank_complete(trace, folder: Path, tag: str, origin_unix_ns: int, gpu_pid: int, prefix: str) -> None:
    kernels, flows = proton_counts(folder / f"{prefix}-{tag}.proton.chrome_trace.gz")
    got = trace.query(f"SELECT count(*) AS n FROM slice s JOIN thread_track tt ON s.track_id = tt.id JOIN thread USING (utid) "
                      f"JOIN process USING (upid) WHERE s.category = 'kernel' AND pid = {gpu_pid}").n[0]
    assert got == kernels
    gaps = gpu_gaps(trace, gpu_pid)
    for stall in load_json(folder / f"{prefix}-{tag}.truth.json.gz")["stalls"]:
        start, end = stall["start_ns"] - origin_unix_ns, stall["end_ns"] - origin_unix_ns
        covered = max(max(0, min(end, b) - max(start, a)) for a, b in gaps)
        assert covered >= 0.8 * (end - start), (tag, stall)


def check_merged(path: Path, folder: Path, prefix: str) -> None:
    record = load_json(path)["tokentrace"]
    with open_trace(path) as trace:
        assert trace.query(STATS_LOST).empty
        flows = trace.query("SELECT count(*) AS n FROM flow").n[0]
        assert flows == sum(proton_counts(folder / f"{prefix}-{r['rank']}.proton.chrome_trace.gz")[1] for r in record["ranks"])
        for rank in record["ranks"]:
            assert_rank_complete(trace, folder, rank["rank"], record["time_origin_unix_ns"], rank["gpu_pid"], prefix)


def test_sample_per_rank_and_combined_lose_nothing(sample_t39, tmp_path):
    result = merge([sample_t39], tmp_path, MergeOptions(combine=True))
    assert [r.n_kernels for r in result.ranks] == [2721, 2721]
    for path in result.outputs:
        check_merged(path, sample_t39, "sample")


def test_same_inputs_same_bytes(sample_t39, tmp_path):
    first = merge([sample_t39], tmp_path / "a", MergeOptions(combine=True, compress=True))
    second = merge([sample_t39], tmp_path / "b", MergeOptions(combine=True, compress=True))
    for a, b in zip(first.outputs, second.outputs):
        assert a.read_bytes() == b.read_bytes()
    assert gzip.decompress(first.outputs[0].read_bytes()).startswith(b'{"traceEvents": [')


def test_estimated_offset_places_truth_stalls(sample_t36, tmp_path):
    # the t36 Proton has no anchor: the per-rank file is on the VizTracer axis, the truth anchored to it
    with pytest.warns(TokentraceWarning, match=r"no clock anchor; offset estimated .* true offset in \["):
        result = merge([sample_t36 / "sample-TP0.viztracer.json.gz",
                        sample_t36 / "sample-TP0.proton.chrome_trace.gz"],
                       tmp_path / "o.json", MergeOptions(align=AlignMode.AUTO))
    assert result.ranks[0].alignment.method == "estimated"
    with open_trace(result.outputs[0]) as trace:
        assert trace.query(STATS_LOST).empty
        assert_rank_complete(trace, sample_t36, "TP0", result.ranks[0].time_origin_unix_ns, result.ranks[0].gpu_pid, "sample")


def test_large_t39_acceptance(shared_traces, tmp_path):
    folder = shared_traces / "t39_tp2"
    result = merge([folder], tmp_path, MergeOptions(combine=True, jobs=2))
    assert [r.n_extra_lanes for r in result.ranks] == [1, 1]
    for path in result.outputs:
        check_merged(path, folder, "run2")
