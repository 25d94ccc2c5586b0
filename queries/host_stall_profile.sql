-- host_stall_profile: which Python functions cost the most GPU idle time, summed over all gaps.
--
-- The totals of `host_stalls` over every gap of at least `min_gap_us` of a rank, per frame:
-- self_ns (leaf time of the frame inside gaps), total_ns (its inclusive time inside gaps),
-- the number of gaps it appears in, and idle_share = self_ns / the rank's total gap time (the
-- self shares of one rank add up to at most 1; the rest is time without any Python frame on the
-- launching thread). Ordered per rank by self_ns desc. All times in ns.
--
-- @param min_gap_us DURATION_US 100  Shortest gap counted (µs or with a unit; >= 0).
-- @param launch_overhead_us DURATION_US 10  Longest gap classed `launch_overhead` (>= 0).
-- @param rank STRING ''  Only this rank tag (e.g. 'TP1'); '' = all ranks.
--
-- @column rank STRING -  Rank tag, e.g. `TP1` (process name for raw traces).
-- @column dp INT -  Data-parallel index (NULL when the tag has none).
-- @column cp INT -  Context-parallel index (NULL when the tag has none).
-- @column tp INT -  Tensor-parallel index (NULL for raw traces).
-- @column stage STRING -  Profiling stage suffix ('' when none).
-- @column frame STRING -  Full VizTracer frame name, `func (file:line)`.
-- @column function STRING -  The frame name without ` (file:line)`.
-- @column gaps INT count  Gaps the frame overlaps.
-- @column self_ns INT ns  Summed overlap of the gaps with the frame's leaf (flattened) time.
-- @column total_ns INT ns  Summed overlap of the gaps with the frame's whole intervals.
-- @column idle_share FLOAT fraction  self_ns / summed length of the rank's gaps.
-- @column gap_time_ns INT ns  Summed length of the rank's gaps (the denominator).

CREATE TABLE IF NOT EXISTS _tt_host_stall_profile_params(
  min_gap_ns INT CONSTRAINT "min_gap_us must be >= 0" CHECK (min_gap_ns >= 0),
  launch_overhead_ns INT CONSTRAINT "launch_overhead_us must be >= 0"
    CHECK (launch_overhead_ns >= 0)
);
INSERT INTO _tt_host_stall_profile_params VALUES (${min_gap_us}, ${launch_overhead_us});

INCLUDE PERFETTO MODULE tokentrace.gaps;
INCLUDE PERFETTO MODULE tokentrace.stalls;

WITH
  _gaps AS MATERIALIZED (
    SELECT * FROM tt_gpu_gaps!(${min_gap_us}, ${launch_overhead_us})
    WHERE ${rank} = '' OR rank = ${rank}
  ),
  _gap_time AS (
    SELECT rank, SUM(dur) AS gap_time_ns FROM _gaps GROUP BY rank
  ),
  _per_frame AS (
    SELECT
      g.rank, f.frame,
      COUNT(DISTINCT f.gap_id) AS gaps,
      SUM(f.self_ns) AS self_ns,
      SUM(f.total_ns) AS total_ns
    FROM tt_gap_frames!(_gaps) AS f
    JOIN _gaps AS g ON g.id = f.gap_id
    GROUP BY g.rank, f.frame
  )
SELECT
  r.rank, r.dp, r.cp, r.tp, r.stage,
  p.frame, tt_frame_function(p.frame) AS function,
  p.gaps, p.self_ns, p.total_ns,
  CAST(p.self_ns AS DOUBLE) / t.gap_time_ns AS idle_share,
  t.gap_time_ns
FROM _per_frame AS p
JOIN _gap_time AS t USING (rank)
JOIN tt_ranks AS r USING (rank)
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank, p.self_ns DESC, p.total_ns DESC, p.frame;
