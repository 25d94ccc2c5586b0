-- tokentrace.queries.step_breakdown: the rows of the bundled query `step_breakdown`
-- (`queries/step_breakdown.sql`).

INCLUDE PERFETTO MODULE intervals.intersect;
INCLUDE PERFETTO MODULE tokentrace.gaps;
INCLUDE PERFETTO MODULE tokentrace.steps;

-- Per scheduler step and rank, how long the step took, how much of it the GPU was busy, and the
-- idle time split by gap class.
--
-- Steps come from `tokentrace.steps`: slices named `step_name` (a Proton scope such as
-- `decode_step`, or a host frame such as `scheduler_step`; ranks with matching scopes use them).
-- Each step's window runs from its start to the next step's start (the last step: to its own
-- end), so the idle gap between steps, where the host stalls before launching the next step, is
-- charged to the step before it. GPU busy = union of the rank's kernels (`tokentrace.gaps`)
-- inside the window; idle_ns = dur - gpu_busy_ns. Idle time inside gaps of at least min_gap_us
-- is split by the gap's class (see `gpu_gaps`; a gap spanning two windows is split between
-- them); idle in shorter gaps is idle_short_ns; idle outside the rank's active GPU window
-- (before its first or after its last kernel) is idle_outside_ns, so
-- idle_ns = the five idle_*_ns classes + idle_short_ns + idle_outside_ns.
-- Traces without a `decode_step` scope (triton <= 3.8, serving engines) find their steps by
-- themselves with the default step_name '' (see `tokentrace.steps`). All times in ns.
CREATE PERFETTO FUNCTION tt_query_step_breakdown(
  -- Scope or host frame (function) name that marks a step; '' finds it: `decode_step` where
  -- present, else the once-per-step host frame (`tt_auto_steps`).
  step_name STRING,
  -- Shortest gap classified (>= 0).
  min_gap_ns DURATION,
  -- Longest gap classed `launch_overhead` (>= 0).
  launch_overhead_ns DURATION
)
RETURNS TABLE(
  -- Rank tag, e.g. `TP1` (process name for raw traces).
  rank STRING,
  -- 1-based index of the step on its rank, in time order.
  step_index LONG,
  -- Step start (window start).
  ts TIMESTAMP,
  -- Window length: to the next step's start (last step: its own duration).
  dur DURATION,
  -- The step slice's own duration.
  step_dur DURATION,
  -- Where the step came from: `scope` (Proton), `host` (VizTracer) or `auto` (the host frame found
  -- for step_name '').
  source STRING,
  -- The name of the step slices.
  step_name STRING,
  -- 1 when the step was still running when the profiler stopped: closed at the end of the rank's
  -- host trace.
  open BOOL,
  -- Time in the window with at least one kernel running.
  gpu_busy_ns DURATION,
  -- dur - gpu_busy_ns.
  idle_ns DURATION,
  -- Idle in `host_late` gaps.
  idle_host_late_ns DURATION,
  -- Idle in `graph_replay` gaps.
  idle_graph_replay_ns DURATION,
  -- Idle in `launch_overhead` gaps.
  idle_launch_overhead_ns DURATION,
  -- Idle in `gpu_queued` gaps.
  idle_gpu_queued_ns DURATION,
  -- Idle in `no_link` gaps.
  idle_no_link_ns DURATION,
  -- Idle in gaps shorter than min_gap_us.
  idle_short_ns DURATION,
  -- Idle outside the rank's first-kernel-to-last-kernel window.
  idle_outside_ns DURATION
)
AS
WITH
  _windows AS MATERIALIZED (
    SELECT id, rank, step_index, ts, dur, step_dur, source, step_name, open
    FROM tt_steps!($step_name)
  ),
  _busy AS (
    SELECT ii.id_0 AS window_id, SUM(ii.dur) AS gpu_busy_ns
    FROM _interval_intersect!((_windows, tt_gpu_busy), (rank)) AS ii
    GROUP BY ii.id_0
  ),
  -- Idle time per window and gap class: the intersection with the idle intervals themselves
  -- (a table the intersection reads in order), each piece classed by its gap.
  _idle_in_window AS (
    SELECT
      ii.id_0 AS window_id,
      IIF(g.dur >= $min_gap_ns,
          tt_gap_class(g.ts, g.dur, g.launch_ts, g.launch_end_ts, g.launch_source,
                       $launch_overhead_ns, g.in_replay), 'short') AS class,
      SUM(ii.dur) AS idle
    FROM _interval_intersect!((_windows, tt_gpu_idle), (rank)) AS ii
    JOIN tt_gpu_idle AS g ON g.id = ii.id_1
    GROUP BY ii.id_0, class
  ),
  _classes AS (
    SELECT
      window_id,
      SUM(IIF(class = 'host_late', idle, 0)) AS idle_host_late_ns,
      SUM(IIF(class = 'graph_replay', idle, 0)) AS idle_graph_replay_ns,
      SUM(IIF(class = 'launch_overhead', idle, 0)) AS idle_launch_overhead_ns,
      SUM(IIF(class = 'gpu_queued', idle, 0)) AS idle_gpu_queued_ns,
      SUM(IIF(class = 'no_link', idle, 0)) AS idle_no_link_ns,
      SUM(IIF(class = 'short', idle, 0)) AS idle_short_ns
    FROM _idle_in_window
    GROUP BY window_id
  ),
  _rows AS (
    SELECT
      w.rank, w.step_index, w.ts, w.dur, w.step_dur, w.source, w.step_name, w.open,
      IFNULL(b.gpu_busy_ns, 0) AS gpu_busy_ns,
      w.dur - IFNULL(b.gpu_busy_ns, 0) AS idle_ns,
      IFNULL(c.idle_host_late_ns, 0) AS idle_host_late_ns,
      IFNULL(c.idle_graph_replay_ns, 0) AS idle_graph_replay_ns,
      IFNULL(c.idle_launch_overhead_ns, 0) AS idle_launch_overhead_ns,
      IFNULL(c.idle_gpu_queued_ns, 0) AS idle_gpu_queued_ns,
      IFNULL(c.idle_no_link_ns, 0) AS idle_no_link_ns,
      IFNULL(c.idle_short_ns, 0) AS idle_short_ns
    FROM _windows AS w
    LEFT JOIN _busy AS b ON b.window_id = w.id
    LEFT JOIN _classes AS c ON c.window_id = w.id
  )
SELECT
  r.rank,
  s.step_index, s.ts, s.dur, s.step_dur, s.source, s.step_name, s.open,
  s.gpu_busy_ns, s.idle_ns,
  s.idle_host_late_ns, s.idle_graph_replay_ns, s.idle_launch_overhead_ns, s.idle_gpu_queued_ns,
  s.idle_no_link_ns, s.idle_short_ns,
  s.idle_ns - s.idle_host_late_ns - s.idle_graph_replay_ns - s.idle_launch_overhead_ns
    - s.idle_gpu_queued_ns
    - s.idle_no_link_ns - s.idle_short_ns AS idle_outside_ns
FROM _rows AS s
JOIN tt_ranks AS r USING (rank)
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank, s.step_index;
