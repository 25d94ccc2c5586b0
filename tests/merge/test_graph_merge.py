"""Merging triton 3.6 Proton files of several JSON documents whose decode runs in CUDA-graph
replays (issue 30): the folder as recorded merges, the offset comes with a narrow interval and
says what bounded it, and the injected stalls land on GPU gaps."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from support.trace_files import load_json
from tokentrace.catalog import open_trace
from tokentrace.merge import merge
from tokentrace.options import MergeOptions

CUT = Path(__file__).resolve().parents[1] / "data" / "compile_proton_cut"
STATS_LOST = "SELECT name, value FROM stats WHERE severity IN ('error', 'data_loss') AND value > 0"
MAX_WIDTH_NS = 100_000


def load_json_documents(path: Path) -> list[dict]:
    """Every JSON document of a gzip file, decoded one after the other by the standard library."""
    text, decoder, documents, at = gzip.decompress(path.read_bytes()).decode(), json.JSONDecoder(), [], 0
    while (at := len(text) - len(text[at:].lstrip())) < len(text):
        document, at = decoder.raw_decode(text, at)
        documents.append(document)
    return documents


def kernel_ends(trace, gpu_pid: int) -> list[tuple[int, int]]:
    rows = trace.query(
        "SELECT s.ts, s.ts + s.dur AS end_ts FROM slice s JOIN thread_track tt ON s.track_id = tt.id "
        f"JOIN thread USING (utid) JOIN process USING (upid) WHERE s.category = 'kernel' AND pid = {gpu_pid} "
        "ORDER BY s.ts")
    return list(zip(rows.ts, rows.end_ts))


def check_rank(output: Path, proton: Path) -> dict:
    record = load_json(output)["tokentrace"]
    rank = record["ranks"][0]
    assert rank["align_method"] == "estimated"
    assert rank["offset_width_ns"] == rank["offset_hi_ns"] - rank["offset_lo_ns"] <= MAX_WIDTH_NS
    assert rank["offset_evidence"].startswith("lower: graph replay end")
    assert "upper: device sync" in rank["offset_evidence"]
    with open_trace(output) as trace:
        assert trace.query(STATS_LOST).empty
        kernels = kernel_ends(trace, rank["gpu_pid"])
    documents = load_json_documents(proton)
    assert len(documents) == 2 and len(kernels) == sum(len(d["traceEvents"]) for d in documents)
    return {"record": record, "kernels": kernels}


@pytest.mark.slow
def test_the_cut_merges_with_its_replay_interval(tmp_path: Path) -> None:
    result = merge([CUT], tmp_path, MergeOptions())
    alignment = result.ranks[0].alignment
    assert alignment.lo_ns <= alignment.offset_ns <= alignment.hi_ns
    check_rank(result.outputs[0], CUT / "cgp-TP0.proton.chrome_trace.gz")


def test_compile_proton_as_recorded(shared_traces: Path, tmp_path: Path) -> None:
    folder = shared_traces / "compile_proton"
    result = merge([folder], tmp_path, MergeOptions())
    found = check_rank(result.outputs[0], folder / "cgp-TP0.proton.chrome_trace.gz")
    origin = found["record"]["time_origin_unix_ns"]
    gaps, busy_end = [], None
    for start, end in found["kernels"]:
        if busy_end is not None and start > busy_end:
            gaps.append((busy_end, start))
        busy_end = end if busy_end is None else max(busy_end, end)
    stalls = load_json(folder / "cgp-TP0.truth.json.gz")["stalls"]
    assert len(stalls) == 9
    for stall in stalls:
        start, end = stall["start_ns"] - origin, stall["end_ns"] - origin
        # the whole stall lies on one gap, which ends after it (the next launch follows the stall)
        assert any(a <= start and end <= b for a, b in gaps), stall
