"""`tt_gap_frame_sums!` and `tt_top_gap_frames!` (tokentrace.stalls) against what they stand for.

Both read a gap's frames from one of two sources (the frames cached for the GPU idle intervals
of at least 100 µs, or the intersection computed for any other gap) and put the sources'
results together after summing or ranking. On a gap set that mixes both sources (the gaps of at
least 50 µs of the merged sample_t39_tp2), their rows must be those of summing and ranking the
rows of `tt_gap_frames!` itself.
"""

from __future__ import annotations

import pandas as pd
import pytest

GAPS = "(SELECT id, rank, ts, dur FROM tt_gpu_gaps!(50000, 10000, 10))"


@pytest.fixture(scope="module")
def stalls(merged_t39):
    _, engine = merged_t39
    engine.query("INCLUDE PERFETTO MODULE tokentrace.stalls")
    return engine


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def test_the_gap_set_mixes_both_sources(stalls):
    counts = stalls.query(f"""
        SELECT SUM(c.id IS NOT NULL) AS cached, SUM(c.id IS NULL) AS computed
        FROM {GAPS} AS g LEFT JOIN _tt_cached_frame_gaps AS c USING (id)""")
    assert counts.cached[0] > 100 and counts.computed[0] > 100


def test_frame_sums_are_the_sums_of_the_gap_frames(stalls):
    sums = stalls.query(f"SELECT * FROM tt_gap_frame_sums!({GAPS})")
    expected = stalls.query(f"""
        SELECT rank, frame, COUNT(DISTINCT gap_id) AS gaps, SUM(self_ns) AS self_ns,
          SUM(total_ns) AS total_ns
        FROM tt_gap_frames!({GAPS}) GROUP BY rank, frame""")
    assert len(sums) > 50 and set(sums["rank"]) == {"TP0", "TP1"}
    pd.testing.assert_frame_equal(_sorted(sums), _sorted(expected))


def test_top_frames_are_the_best_ranked_gap_frames(stalls):
    top = stalls.query(f"SELECT * FROM tt_top_gap_frames!({GAPS}, 3)")
    expected = stalls.query(f"SELECT * FROM tt_ranked_gap_frames!({GAPS}) WHERE frame_rank <= 3")
    assert len(top) > 1000 and top.frame_rank.max() == 3
    pd.testing.assert_frame_equal(_sorted(top), _sorted(expected))
