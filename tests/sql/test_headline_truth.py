"""The headline a user reads first, on every real trace set with ground truth: each rank's top
stall cause (`rank_summary.top_function`) is the frame of a stall the workload injected (truth
`frame`, or serve_sim's `host_stall`) or the real stall its README names (cuDNN attention's plan
building in `sdpa_attention_forward` / `sdpa_attention_paged_forward`). A frame that sits in many
stalls without causing them (a GIL victim, `CUDAGraph.replay`, a leaf under the culprit) must
not win, and the headline is the first of the rank's stalls by cause."""

from __future__ import annotations

import pytest

from support.merged_fixtures import SERVING_SETS, THIRD_PARTY_SETS, TRACE_SETS
from support.trace_files import load_json
from tokentrace.catalog import run_query

# Real stalls named in ../shared/traces/README.md (not injected).
REAL = {"sdpa_attention_forward", "sdpa_attention_paged_forward"}
# The decode-loop sets' truth has no frame: serve_sim sleeps in host_stall.
DECODE_LOOP_FRAME = "host_stall"
SETS = [*TRACE_SETS, *SERVING_SETS, *THIRD_PARTY_SETS]


def _truth_frames(folder) -> dict[str, set[str]]:
    frames: dict[str, set[str]] = {}
    for path in sorted(folder.glob("*.truth.json.gz")):
        truth = load_json(path)
        tag = truth.get("tag") or path.name.split(".")[0].rsplit("-", 1)[-1]
        frames.setdefault(tag, set()).update(s.get("frame") or DECODE_LOOP_FRAME for s in truth["stalls"])
    return frames


@pytest.mark.parametrize("name", SETS)
def test_headline_is_an_injected_or_named_stall(merged_sets, name):
    folder, _, engine = merged_sets(name)
    truth = _truth_frames(folder)
    summary = run_query(engine, "rank_summary")
    assert truth and set(truth) <= set(summary["rank"]), (name, list(truth), list(summary["rank"]))
    for _, row in summary[summary["rank"].isin(truth)].iterrows():
        where = f"{name} {row['rank']}: {row['top_kind']} {row['top_function']}"
        assert row["top_function"] in truth[row["rank"]] | REAL, where
        # the headline is the first of the stalls by cause, and explains part of its stalls
        assert row["next_functions"].split(" (")[0] == row["top_function"], where
        assert 0 < row["top_idle_ns"] <= row["top_stall_ns"] <= row["stall_idle_ns"], where
