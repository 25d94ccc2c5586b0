-- tokentrace.queries.host_stall_profile: the rows of the bundled query `host_stall_profile`
-- (`queries/host_stall_profile.sql`).

INCLUDE PERFETTO MODULE tokentrace.gaps;
INCLUDE PERFETTO MODULE tokentrace.stalls;

-- Which Python functions cost the most GPU idle time, summed over gaps.
--
-- The totals of `host_stalls` over the selected gaps of a rank, per frame: self_ns (leaf time of
-- the frame inside gaps), total_ns (its inclusive time inside gaps), the number of gaps it
-- appears in, and idle_share = self_ns / the rank's
-- total time in the selected gaps (the self shares of one rank add up to at most 1; the rest is
-- time without any Python frame on the launching thread). Ordered per rank by self_ns desc, so
-- the first row of a rank is its top cause. All times in ns.
--
-- Selected gaps: min_gap_us <= dur (< max_gap_us when max_gap_us > 0); `steady` gaps only
-- unless include_startup (start-up gaps, before the rank's first `startup_kernels` kernels, are
-- one-off CUPTI/lazy-init/JIT costs, not the steady state: see `gpu_gaps`); with host_only,
-- only host-caused gaps (`by_host`: `host_late`).
-- `tokentrace analyze` names a rank's top stall cause from the first row of this query with
-- min_gap_us = the stall threshold and host_only, and its shorter host gaps from the same
-- query with max_gap_us = the threshold.
CREATE PERFETTO FUNCTION tt_query_host_stall_profile(
  -- Shortest gap counted (>= 0).
  min_gap_ns DURATION,
  -- Only gaps shorter than this (>= 0; 0 = no upper bound).
  max_gap_ns DURATION,
  -- Longest gap classed `launch_overhead` (>= 0).
  launch_overhead_ns DURATION,
  -- Gaps before the rank's first this-many kernels are `startup` (>= 0; see `gpu_gaps`).
  startup_kernels LONG,
  -- Count `startup` gaps too (default: steady gaps only).
  include_startup BOOL,
  -- Count only host-caused gaps (`by_host` = 1).
  host_only BOOL,
  -- Only this rank tag (e.g. 'TP1'); '' = all ranks.
  rank STRING
)
RETURNS TABLE(
  -- Rank tag, e.g. `TP1` (process name for raw traces).
  rank STRING,
  -- 1 = the frame with the most self time on its rank (its top cause).
  frame_rank LONG,
  -- Full VizTracer frame name, `func (file:line)`.
  frame STRING,
  -- The frame name without ` (file:line)`.
  function STRING,
  -- Gaps the frame overlaps.
  gaps LONG,
  -- Summed overlap of the gaps with the frame's leaf (flattened) time.
  self_ns DURATION,
  -- Summed overlap of the gaps with the frame's whole intervals.
  total_ns DURATION,
  -- self_ns / summed length of the rank's gaps.
  idle_share DOUBLE,
  -- Summed length of the rank's selected gaps (the denominator).
  gap_time_ns DURATION,
  -- Number of the rank's selected gaps.
  rank_gaps LONG
)
AS
WITH
  _gaps AS MATERIALIZED (
    SELECT * FROM tt_gpu_gap_rows($min_gap_ns, $launch_overhead_ns, $startup_kernels)
    WHERE ($rank = '' OR rank = $rank)
      AND ($max_gap_ns = 0 OR dur < $max_gap_ns)
      AND ($include_startup OR phase = 'steady')
      AND (NOT $host_only OR by_host = 1)
  ),
  _gap_time AS (
    SELECT rank, SUM(dur) AS gap_time_ns, COUNT(*) AS rank_gaps FROM _gaps GROUP BY rank
  ),
  _per_frame AS (
    SELECT rank, frame, gaps, self_ns, total_ns
    FROM tt_gap_frame_sums!(_gaps)
  )
SELECT
  r.rank,
  ROW_NUMBER() OVER (
    PARTITION BY p.rank ORDER BY p.self_ns DESC, p.total_ns DESC, p.frame
  ) AS frame_rank,
  p.frame, tt_frame_function(p.frame) AS function,
  p.gaps, p.self_ns, p.total_ns,
  CAST(p.self_ns AS DOUBLE) / t.gap_time_ns AS idle_share,
  t.gap_time_ns, t.rank_gaps
FROM _per_frame AS p
JOIN _gap_time AS t USING (rank)
JOIN tt_ranks AS r USING (rank)
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank, p.self_ns DESC, p.total_ns DESC, p.frame;
