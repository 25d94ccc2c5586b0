"""A gap shorter than the clock offset's interval cannot be classed with confidence (issue 30):
within the interval the next kernel's launch may fall on either side of the gap's start.
`gpu_gaps.class_uncertain` marks those gaps on ranks whose offset was estimated."""

from __future__ import annotations

from tokentrace.catalog import run_query


def test_gaps_shorter_than_the_offset_interval_are_marked(merged_sets):
    for name, estimated in (("sample_t36_tp2", True), ("sample_t39_tp2", False)):
        _, _, engine = merged_sets(name)
        ranks = engine.query(
            "INCLUDE PERFETTO MODULE tokentrace.ranks; "
            "SELECT rank, align_method, offset_hi_ns - offset_lo_ns AS width FROM tt_ranks")
        assert (ranks.align_method == "estimated").all() == estimated
        gaps = run_query(engine, "gpu_gaps", {"min_gap_us": 0}).merge(ranks, on="rank")
        expected = (gaps.align_method == "estimated") & (gaps.width > gaps.dur)
        assert (gaps.class_uncertain == expected.astype(int)).all(), name
        assert gaps.class_uncertain.any() == estimated
        # the injected 8 ms stalls are far longer than any interval: never marked
        assert not gaps[gaps.dur > 5_000_000].class_uncertain.any()
