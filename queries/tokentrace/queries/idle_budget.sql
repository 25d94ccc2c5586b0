-- tokentrace.queries.idle_budget: the rows of the bundled query `idle_budget`
-- (`queries/idle_budget.sql`).

INCLUDE PERFETTO MODULE tokentrace.causes;
INCLUDE PERFETTO MODULE tokentrace.gaps;
INCLUDE PERFETTO MODULE tokentrace.steps;

-- Where did each rank's GPU idle time go? One row per rank and category; the categories add up to
-- the rank's idle time inside its active window (`gpu_windows.idle_ns`).
--
-- Reads the gaps of `gpu_gaps` (at least min_gap_us) and the causes of `gap_causes`
-- (`tokentrace.causes`). Categories, each gap counted once, whole:
--   * `startup`: gaps of the `startup` phase (the host's one-off set-up among the first kernels:
--     module loads, CUDA and NCCL initialisation, compiles; `tokentrace.setup`),
--     and steady gaps that overlap a CUDA-graph stream capture (`tt_capture_windows`: the
--     kernels launched inside it are captured, not run; set-up, not a host stall);
--   * `host_<kind>` for the steady host-caused gaps (`by_host` = 1), by why the host was late:
--     `host_busy`, `host_blocking`, `host_sync`, `host_gil`, `host_gc`, `host_unknown`;
--   * `no_work`: steady gaps while the launching thread waited for work (cause `no_work`: the
--     engine was starved; no host code could have filled them);
--   * `graph_replay`: inside or between CUDA-graph replays the GPU ran on its own;
--   * `gpu_wait`: the next kernel was launched before the gap (`gpu_queued`, `launch_overhead`);
--   * `untraced`: nothing on the host explains the next kernel (`no_link`), or the gap lies
--     outside the launching thread's traced span (before the host trace began, after it ended);
--   * `short_gaps`: the idle time in gaps shorter than min_gap_us (launch-bound back-to-back
--     kernels: per-launch overhead that CUDA graphs remove), i.e. the rest of the idle time.
-- `share` = idle_ns / the rank's idle time, so a rank's shares add up to 1. Per step: each
-- category's gaps and idle_ns divided by the rank's steps (`tokentrace.steps`, the steps of
-- `step_breakdown`; NULL without steps): the launch-bound idle every step pays in `short_gaps`.
-- All times in ns.
CREATE PERFETTO FUNCTION tt_query_idle_budget(
  -- Shortest gap given a category of its own; idle in shorter gaps is `short_gaps` (>= 0).
  min_gap_ns DURATION,
  -- Longest gap classed `launch_overhead` (>= 0).
  launch_overhead_ns DURATION,
  -- Gaps before the rank's first this-many kernels are `startup` (>= 0; see `gpu_gaps`).
  startup_kernels LONG,
  -- Scope or host frame (function) name that marks a step; '' finds it: `decode_step` where
  -- present, else the once-per-step host frame (`tt_auto_steps`).
  step_name STRING,
  -- Only this rank tag (e.g. 'TP1'); '' = all ranks.
  rank STRING
)
RETURNS TABLE(
  -- Rank tag, e.g. `TP1` (process name for raw traces).
  rank STRING,
  -- `startup`, `host_busy`, `host_blocking`, `host_sync`, `host_gil`, `host_gc`, `host_unknown`,
  -- `no_work`, `graph_replay`, `gpu_wait`, `untraced` or `short_gaps`.
  category STRING,
  -- Gaps in the category (for `short_gaps`: the idle intervals shorter than min_gap_us).
  gaps LONG,
  -- GPU idle time in the category.
  idle_ns DURATION,
  -- idle_ns / the rank's GPU idle time (0 when it has none).
  share DOUBLE,
  -- The rank's GPU idle time inside its active window (the sum of idle_ns over its categories).
  active_idle_ns DURATION,
  -- The rank's steps (`tokentrace.steps`; 0 when none is found).
  steps LONG,
  -- gaps / steps (NULL without steps).
  gaps_per_step DOUBLE,
  -- idle_ns / steps, rounded down (NULL without steps).
  idle_per_step_ns DURATION,
  -- For `short_gaps` holding some idle time, at least a fifth of it, on a rank that replays no
  -- CUDA graph (no kernel of a replay, no graph launch call): `eager launches: CUDA graphs would
  -- remove most of this`; else NULL.
  hint STRING
)
AS
WITH
  _gaps AS MATERIALIZED (
    SELECT * FROM tt_gpu_gap_rows($min_gap_ns, $launch_overhead_ns, $startup_kernels)
    WHERE $rank = '' OR rank = $rank
  ),
  _captures AS MATERIALIZED (
    SELECT rank, ts, ts + dur AS end_ts FROM tt_capture_windows WHERE $rank = '' OR rank = $rank
  ),
  -- Steady gaps that overlap a stream capture: set-up, as the start-up gaps are.
  _captured AS MATERIALIZED (
    SELECT DISTINCT g.id
    FROM _gaps AS g
    JOIN _captures AS c ON c.rank = g.rank AND c.ts < g.ts + g.dur AND g.ts < c.end_ts
    WHERE g.phase = 'steady'
  ),
  -- (gap sets are CTEs, not subquery arguments: see `_tt_cached_source!`)
  _steady AS (SELECT * FROM _gaps WHERE phase = 'steady' AND id NOT IN (SELECT id FROM _captured)),
  _causes AS MATERIALIZED (SELECT * FROM tt_gap_causes!(_steady)),
  _categorised AS (
    SELECT
      g.rank, g.dur,
      CASE
        WHEN g.phase = 'startup' OR g.id IN (SELECT id FROM _captured) THEN 'startup'
        WHEN g.by_host = 1 AND c.cause_kind = 'no_work' THEN 'no_work'
        WHEN g.by_host = 1 THEN 'host_' || IFNULL(c.cause_kind, 'unknown')
        WHEN g.gap_class = 'graph_replay' THEN 'graph_replay'
        WHEN g.gap_class IN ('gpu_queued', 'launch_overhead') THEN 'gpu_wait'
        ELSE 'untraced'
      END AS category
    FROM _gaps AS g
    LEFT JOIN _causes AS c ON c.gap_id = g.id
  ),
  _idle AS (
    SELECT rank, MAX(ts + dur) - MIN(ts) - SUM(dur) AS idle_ns
    FROM tt_gpu_busy
    WHERE $rank = '' OR rank = $rank
    GROUP BY rank
  ),
  -- Ranks that use CUDA graphs: a kernel launched by a replay, or a graph launch or stream
  -- capture call of the CUDA runtime or driver or of HIP in one of the rank's processes
  -- (`tt_rank_graph_calls`), linked or not: no advice to use graphs there.
  _graphs AS (
    SELECT DISTINCT rank FROM tt_kernel_launches WHERE kind = 'graph'
    UNION
    SELECT rank FROM tt_rank_graph_calls WHERE launch_calls > 0 OR capture_calls > 0
  ),
  _short AS (
    SELECT rank, COUNT(*) AS gaps
    FROM tt_gpu_idle
    WHERE dur < $min_gap_ns AND ($rank = '' OR rank = $rank)
    GROUP BY rank
  ),
  _steps AS (
    SELECT rank, COUNT(*) AS steps FROM tt_steps!($step_name) GROUP BY rank
  ),
  _counted AS (
    SELECT rank, category, COUNT(*) AS gaps, SUM(dur) AS idle_ns
    FROM _categorised
    GROUP BY rank, category
  ),
  _rows AS (
    SELECT rank, category, gaps, idle_ns FROM _counted
    UNION ALL
    SELECT
      i.rank, 'short_gaps' AS category, IFNULL(s.gaps, 0) AS gaps,
      i.idle_ns - IFNULL((SELECT SUM(c.idle_ns) FROM _counted AS c WHERE c.rank = i.rank), 0)
        AS idle_ns
    FROM _idle AS i
    LEFT JOIN _short AS s USING (rank)
  )
SELECT
  r.rank,
  w.category, w.gaps, w.idle_ns,
  IIF(i.idle_ns > 0, CAST(w.idle_ns AS DOUBLE) / i.idle_ns, 0.0) AS share,
  i.idle_ns AS active_idle_ns,
  IFNULL(st.steps, 0) AS steps,
  CAST(w.gaps AS DOUBLE) / st.steps AS gaps_per_step,
  w.idle_ns / st.steps AS idle_per_step_ns,
  IIF(w.category = 'short_gaps' AND g.rank IS NULL AND w.idle_ns > 0
        AND w.idle_ns * 5 >= i.idle_ns,
      'eager launches: CUDA graphs would remove most of this', NULL) AS hint
FROM _rows AS w
JOIN _idle AS i USING (rank)
LEFT JOIN _graphs AS g USING (rank)
LEFT JOIN _steps AS st USING (rank)
JOIN tt_ranks AS r USING (rank)
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank, w.idle_ns DESC, w.category;
