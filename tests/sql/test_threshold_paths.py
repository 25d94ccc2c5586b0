"""Default and non-default thresholds: where a gap's frames and cause come from.

The frames of the GPU idle intervals of at least `tt_default_min_gap_ns()` (100 µs), and the
causes of the host-caused ones, are computed once per trace (`_tt_cached_gap_frames`,
`_tt_cached_gap_causes`); any other gap's are computed by the query that asks
(`_tt_gap_frames_computed!`, `_tt_gap_causes_computed!`). On the merged sample_t39_tp2 the two
give the same rows for the same gaps, and a threshold at or above the default reads every gap
from the cache: only the gaps shorter than the default take the other way.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def causes(merged_t39):
    _, engine = merged_t39
    engine.query("INCLUDE PERFETTO MODULE tokentrace.causes")
    return engine


def _differences(engine, cached: str, computed: str) -> tuple[int, int, int]:
    rows = engine.query(f"""
        WITH c AS ({cached}), k AS ({computed})
        SELECT (SELECT COUNT(*) FROM (SELECT * FROM c EXCEPT SELECT * FROM k)) AS only_cached,
          (SELECT COUNT(*) FROM (SELECT * FROM k EXCEPT SELECT * FROM c)) AS only_computed,
          (SELECT COUNT(*) FROM c) AS rows""")
    return tuple(int(rows[column][0]) for column in ("only_cached", "only_computed", "rows"))


def test_cached_frames_are_the_computed_frames(causes):
    columns = "gap_id, frame_id, frame, depth, self_ns, total_ns, rank"
    only_cached, only_computed, rows = _differences(
        causes, f"SELECT {columns} FROM _tt_cached_gap_frames",
        f"SELECT {columns} FROM _tt_gap_frames_computed!(_tt_cached_frame_gaps)")
    assert rows > 1000 and only_cached == only_computed == 0


def test_cached_causes_are_the_computed_causes(causes):
    columns = "gap_id, cause_kind, cause_thread, cause_function, cause_frame, cause_call, cause_ns"
    only_cached, only_computed, rows = _differences(
        causes, f"SELECT {columns} FROM _tt_cached_gap_causes",
        f"""SELECT {columns} FROM _tt_gap_causes_computed!(
              _tt_cached_cause_gaps, _tt_gap_frames_computed!(_tt_cached_cause_gaps))""")
    assert rows > 100 and only_cached == only_computed == 0


@pytest.mark.parametrize(("min_gap_ns", "all_cached"), [(100_000, True), (1_000_000, True),
                                                        (50_000, False)])
def test_only_gaps_under_the_default_are_computed(causes, min_gap_ns, all_cached):
    counts = causes.query(f"""
        SELECT COUNT(*) AS gaps, SUM(c.id IS NULL) AS computed, SUM(g.dur < tt_default_min_gap_ns()) AS short
        FROM tt_gpu_gap_rows({min_gap_ns}, 10000, 10) AS g
        LEFT JOIN _tt_cached_frame_gaps AS c ON c.id = g.id AND c.rank = g.rank AND c.ts = g.ts
          AND c.dur = g.dur""")
    assert counts.gaps[0] > 0 and counts.computed[0] == counts.short[0]
    assert (counts.computed[0] == 0) == all_cached
