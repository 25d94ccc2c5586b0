"""Ground truth: every host stall injected by serve_sim.py (the `.truth.json.gz` sidecars) is
found by the stall SQL on the merged trace: a GPU gap of the same rank covering >= 80 % of the
stall, classed `host_late` where launch flows exist (`no_link` on triton 3.6 traces), and
`host_stall` ranked first among the host frames behind that gap."""

from __future__ import annotations

import pytest

from conftest import load_json
from stall_fixtures import available_sets, merged_sets  # noqa: F401  (fixture)
from tokentrace.queries import run_query

EXPECTED_CLASS = {"t39": "host_late", "t36": "no_link"}


def _truth_stalls(folder):
    stalls = []
    for path in sorted(folder.glob("*.truth.json.gz")):
        truth = load_json(path)
        stalls += [dict(stall, tag=f"TP{truth['rank']}") for stall in truth["stalls"]]
    return stalls


def _covering_gap(gaps, stall):
    """The gap of the stall's rank that overlaps it most, and the covered fraction."""
    rows = gaps[gaps["rank"] == stall["tag"]]
    start, end = stall["start_ns"], stall["end_ns"]
    overlap = ((rows.unix_ts + rows.dur).clip(upper=end) - rows.unix_ts.clip(lower=start)).clip(lower=0)
    best = overlap.idxmax()
    return rows.loc[best], overlap[best] / (end - start)


@pytest.mark.parametrize("name", available_sets())
def test_every_injected_stall_found(merged_sets, name):
    folder, _, engine = merged_sets(name)
    stalls = _truth_stalls(folder)
    assert stalls, f"{folder} has no injected stalls"
    gaps = run_query(engine, "gpu_gaps")
    frames = run_query(engine, "host_stalls")
    assert gaps.unix_ts.notna().all()
    expected_class = EXPECTED_CLASS[name.split("_")[-2]]
    for stall in stalls:
        gap, covered = _covering_gap(gaps, stall)
        where = f"{name} {stall['tag']} step {stall['step']}"
        assert covered >= 0.8, f"{where}: best gap covers only {covered:.0%}"
        assert gap.gap_class == expected_class, where
        if expected_class == "host_late":
            assert gap.host_caused_ns >= 0.8 * (stall["end_ns"] - stall["start_ns"]), where
        top = frames[(frames["rank"] == gap["rank"]) & (frames.gap_index == gap.gap_index)
                     & (frames.frame_rank == 1)]
        assert top.function.tolist() == ["host_stall"], where
        assert top.self_ns.iloc[0] >= 0.8 * (stall["end_ns"] - stall["start_ns"]), where
