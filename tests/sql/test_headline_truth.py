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


# A host-caused gap this long is read by users gap by gap: its cause must carry it.
LONG_GAP_NS = 20_000_000


@pytest.mark.parametrize("name", SETS)
def test_every_long_host_caused_gap_is_carried_by_its_cause(merged_sets, name):
    """Every host-caused gap of 20 ms or more is carried by its evidence: the cause it names
    covers most of it, or, where the host did two things in it (serve_engine builds garbage for
    115 ms, then collects it for 104 ms), at least the fifth its rule needs while the launching
    thread's traced frames cover most of the rest. A gap from before the host trace is
    `untraced`, never host-caused; a cause explaining 0.2 ms of a 50 ms gap fails here."""
    _, _, engine = merged_sets(name)
    gaps = run_query(engine, "gap_causes")
    long = gaps[(gaps["by_host"] == 1) & (gaps["dur"] >= LONG_GAP_NS)]
    frames = run_query(engine, "host_stalls", {"top": 50, "min_gap_us": LONG_GAP_NS // 1000})
    traced = frames.groupby(["rank", "gap_ts"])["self_ns"].sum()  # gap_index depends on min_gap_us
    for _, gap in long.iterrows():
        where = (f"{name} {gap['rank']} gap {gap['gap_index']} ({gap['phase']}, {gap['dur'] / 1e6:.1f} ms): "
                 f"{gap['cause_kind']} {gap['cause_function']} covers {gap['cause_ns'] / 1e6:.1f} ms")
        if gap["cause_ns"] * 2 < gap["dur"]:
            assert gap["cause_ns"] * 5 >= gap["dur"], where
            assert traced.get((gap["rank"], gap["ts"]), 0) * 10 >= gap["dur"] * 9, where
