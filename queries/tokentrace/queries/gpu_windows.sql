-- tokentrace.queries.gpu_windows: the rows of the bundled query `gpu_windows`
-- (`queries/gpu_windows.sql`).

INCLUDE PERFETTO MODULE tokentrace.gaps;

-- Per rank, the GPU's active window and how its idle time splits.
--
-- The active window runs from the rank's first kernel start to its last kernel end
-- (`tokentrace.gaps`: the frame of the timeline plot; every gap lies inside it). GPU busy =
-- union of the rank's kernels; idle_ns = active_ns - busy_ns (all idle, however short). Gaps of
-- at least min_gap_us (as in `gpu_gaps`, with their class, phase and by_host) are summed by
-- class, by phase, and for the steady host-caused ones. All times in ns.
CREATE PERFETTO FUNCTION tt_query_gpu_windows(
  -- Shortest gap counted in the gap columns (>= 0).
  min_gap_ns DURATION,
  -- Longest gap classed `launch_overhead` (>= 0).
  launch_overhead_ns DURATION,
  -- Gaps before the rank's first this-many kernels are `startup` (>= 0; see `gpu_gaps`).
  startup_kernels LONG,
  -- Only this rank tag (e.g. 'TP1'); '' = all ranks.
  rank STRING
)
RETURNS TABLE(
  -- Rank tag, e.g. `TP1` (process name for raw traces).
  rank STRING,
  -- First kernel start.
  first_ts TIMESTAMP,
  -- Last kernel end.
  last_end_ts TIMESTAMP,
  -- last_end_ts - first_ts.
  active_ns DURATION,
  -- Kernels of the rank.
  kernels LONG,
  -- Time with at least one kernel running.
  busy_ns DURATION,
  -- active_ns - busy_ns.
  idle_ns DURATION,
  -- idle_ns / active_ns (0 when active_ns = 0).
  idle_share DOUBLE,
  -- Gaps of at least min_gap_us.
  gaps LONG,
  -- Their summed length.
  gap_idle_ns DURATION,
  -- In `host_late` gaps.
  idle_host_late_ns DURATION,
  -- In `graph_replay` gaps.
  idle_graph_replay_ns DURATION,
  -- In `launch_overhead` gaps.
  idle_launch_overhead_ns DURATION,
  -- In `gpu_queued` gaps.
  idle_gpu_queued_ns DURATION,
  -- In `no_link` gaps.
  idle_no_link_ns DURATION,
  -- In `startup` gaps.
  idle_startup_ns DURATION,
  -- In steady host-caused gaps (`by_host` = 1).
  idle_host_steady_ns DURATION
)
AS
WITH
  _busy AS (
    SELECT rank, MIN(ts) AS first_ts, MAX(ts + dur) AS last_end_ts, SUM(kernels) AS kernels,
      SUM(dur) AS busy_ns
    FROM tt_gpu_busy
    GROUP BY rank
  ),
  _gaps AS (
    SELECT
      rank, COUNT(*) AS gaps, SUM(dur) AS gap_idle_ns,
      SUM(IIF(gap_class = 'host_late', dur, 0)) AS idle_host_late_ns,
      SUM(IIF(gap_class = 'graph_replay', dur, 0)) AS idle_graph_replay_ns,
      SUM(IIF(gap_class = 'launch_overhead', dur, 0)) AS idle_launch_overhead_ns,
      SUM(IIF(gap_class = 'gpu_queued', dur, 0)) AS idle_gpu_queued_ns,
      SUM(IIF(gap_class = 'no_link', dur, 0)) AS idle_no_link_ns,
      SUM(IIF(phase = 'startup', dur, 0)) AS idle_startup_ns,
      SUM(IIF(phase = 'steady' AND by_host = 1, dur, 0)) AS idle_host_steady_ns
    FROM tt_gpu_gap_rows($min_gap_ns, $launch_overhead_ns, $startup_kernels)
    GROUP BY rank
  )
SELECT
  r.rank,
  b.first_ts, b.last_end_ts, b.last_end_ts - b.first_ts AS active_ns, b.kernels, b.busy_ns,
  b.last_end_ts - b.first_ts - b.busy_ns AS idle_ns,
  IIF(b.last_end_ts > b.first_ts,
      CAST(b.last_end_ts - b.first_ts - b.busy_ns AS DOUBLE) / (b.last_end_ts - b.first_ts),
      0.0) AS idle_share,
  IFNULL(g.gaps, 0) AS gaps, IFNULL(g.gap_idle_ns, 0) AS gap_idle_ns,
  IFNULL(g.idle_host_late_ns, 0) AS idle_host_late_ns,
  IFNULL(g.idle_graph_replay_ns, 0) AS idle_graph_replay_ns,
  IFNULL(g.idle_launch_overhead_ns, 0) AS idle_launch_overhead_ns,
  IFNULL(g.idle_gpu_queued_ns, 0) AS idle_gpu_queued_ns,
  IFNULL(g.idle_no_link_ns, 0) AS idle_no_link_ns,
  IFNULL(g.idle_startup_ns, 0) AS idle_startup_ns,
  IFNULL(g.idle_host_steady_ns, 0) AS idle_host_steady_ns
FROM _busy AS b
JOIN tt_ranks AS r USING (rank)
LEFT JOIN _gaps AS g USING (rank)
WHERE $rank = '' OR b.rank = $rank
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank;
