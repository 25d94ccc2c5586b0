-- rank_summary: per rank, the top stall cause, the shorter host gaps and the cost per step.
--
-- One row per rank with kernels (the ranks of `gpu_windows`; `tokentrace analyze` shows the two
-- side by side). Stalls as in `gap_causes`: steady gaps with by_host = 1 of at least
-- stall_min_us. The **top stall cause** is the Python frame with the most self time summed over
-- the rank's stalls (ranked by self_ns desc, total_ns desc, frame): the first row of
-- `host_stall_profile` with min_gap_us = stall_min_us and host_only. The **shorter host gaps**
-- are the rank's other steady host-caused gaps of at least min_gap_us (`host_stall_profile`
-- with max_gap_us = stall_min_us and host_only): their summed length and the frame with the most
-- self time in them. Steps as in `step_breakdown` (slices named step_name, `tokentrace.steps`);
-- the cost per step is the top cause's idle time over the rank's steps. All times in ns.
--
-- @param min_gap_us DURATION_US>=0 100  Shortest gap counted among the shorter host gaps (>= 0).
-- @param launch_overhead_us DURATION_US>=0 10  Longest gap classed `launch_overhead` (>= 0).
-- @param startup_kernels INT>=0 10  Gaps before the rank's first this-many kernels are `startup`
--   (>= 0; see `gpu_gaps`).
-- @param stall_min_us DURATION_US>=0 2000  Steady host-caused gaps at least this long are stalls
--   (>= 0).
-- @param step_name STRING ''  Scope or host frame (function) name that marks a step; '' finds
--   it: `decode_step` where present, else the once-per-step host frame (`tt_auto_steps`).
-- @param rank STRING ''  Only this rank tag (e.g. 'TP1'); '' = all ranks.
--
-- @column rank STRING -  Rank tag, e.g. `TP1` (process name for raw traces).
-- @column dp INT -  Data-parallel index (NULL when the tag has none).
-- @column cp INT -  Context-parallel index (NULL when the tag has none).
-- @column tp INT -  Tensor-parallel index (NULL for raw traces).
-- @column stage STRING -  Profiling stage suffix ('' when none).
-- @column stalls INT count  The rank's stalls.
-- @column stall_idle_ns INT ns  Their summed length.
-- @column top_function STRING -  The top stall cause's function (NULL without stalls or host
--   frames).
-- @column top_frame STRING -  Its full VizTracer frame name, `func (file:line)`.
-- @column top_idle_ns INT ns  Its self time summed over the stalls (0 when none).
-- @column top_gaps INT count  Stalls it appears in (0 when none).
-- @column next_functions STRING -  Each stall's own cause (as in `gap_causes`) as `function
--   (file:line) (kind [held by thread] [in call])`, the eight blamed for the most stall time first,
--   comma-separated; NULL when none.
-- @column stall_kinds STRING -  The cause kinds of the rank's stalls with their counts, the kind
--   explaining the most stall time first (`gc 2, blocking 3, gil 2, ...`); NULL without stalls.
-- @column short_gaps INT count  The rank's shorter host gaps.
-- @column short_idle_ns INT ns  Their summed length.
-- @column short_top_function STRING -  The function with the most self time in them.
-- @column step_name STRING -  The name of the rank's steps (found when step_name is ''; the
--   given step_name when none matched).
-- @column step_source STRING -  `scope`, `host` or `auto` (a found host frame; NULL: no step).
-- @column steps INT count  The rank's steps (0: no slice is named step_name).
-- @column top_idle_per_step_ns INT ns  top_idle_ns / steps, rounded down (NULL without steps).

INCLUDE PERFETTO MODULE tokentrace.causes;
INCLUDE PERFETTO MODULE tokentrace.gaps;
INCLUDE PERFETTO MODULE tokentrace.stalls;
INCLUDE PERFETTO MODULE tokentrace.steps;

WITH
  -- The steady host-caused gaps, each a stall or a shorter host gap: one frame intersection
  -- serves both (a gap is at least min_gap_us unless it is a stall).
  _gaps AS MATERIALIZED (
    SELECT *, IIF(dur >= ${stall_min_ns}, 1, 0) AS is_stall
    FROM tt_gpu_gaps!(MIN(${min_gap_ns}, ${stall_min_ns}), ${launch_overhead_ns},
                      ${startup_kernels})
    WHERE (${rank} = '' OR rank = ${rank}) AND phase = 'steady' AND by_host = 1
  ),
  _counts AS (
    SELECT
      rank,
      SUM(is_stall) AS stalls, SUM(IIF(is_stall = 1, dur, 0)) AS stall_idle_ns,
      SUM(1 - is_stall) AS short_gaps, SUM(IIF(is_stall = 0, dur, 0)) AS short_idle_ns
    FROM _gaps
    GROUP BY rank
  ),
  -- (one sum per gap set: one sum keyed by the set as well took twice as long, t39 TP0)
  _per_frame AS (
    SELECT 1 AS is_stall, * FROM tt_gap_frame_sums!((SELECT * FROM _gaps WHERE is_stall = 1))
    UNION ALL
    SELECT 0 AS is_stall, * FROM tt_gap_frame_sums!((SELECT * FROM _gaps WHERE is_stall = 0))
  ),
  _ranked AS (
    SELECT
      *,
      ROW_NUMBER() OVER (
        PARTITION BY rank, is_stall ORDER BY self_ns DESC, total_ns DESC, frame
      ) AS frame_rank
    FROM _per_frame
  ),
  _top AS (
    SELECT * FROM _ranked WHERE frame_rank = 1
  ),
  -- Each stall's own cause (as in gap_causes), and every kind of cause on the rank.
  _stall_causes AS (
    SELECT g.rank, c.cause_frame AS frame, c.cause_kind, c.cause_call, c.cause_thread, g.dur
    FROM tt_gap_causes!((SELECT * FROM _gaps WHERE is_stall = 1)) AS c
    JOIN _gaps AS g ON g.id = c.gap_id
  ),
  _kinds AS (
    SELECT rank, GROUP_CONCAT(label, ', ') AS stall_kinds
    FROM (
      SELECT rank, cause_kind || ' ' || COUNT(*) AS label, SUM(dur) AS kind_ns
      FROM _stall_causes
      GROUP BY rank, cause_kind
      ORDER BY rank, kind_ns DESC, cause_kind
    )
    GROUP BY rank
  ),
  _next AS (
    SELECT rank, GROUP_CONCAT(function, ', ') AS next_functions
    FROM (
      SELECT
        *, ROW_NUMBER() OVER (PARTITION BY rank ORDER BY blamed_ns DESC, function) AS position
      FROM (
        SELECT
          rank,
          frame || ' (' || cause_kind
            || IIF(cause_kind = 'gil', ' held by ' || cause_thread, '')
            || IIF(cause_kind = 'no_work', ': the engine waited for work; ' || cause_thread, '')
            || IIF(cause_call IS NOT NULL, ' in ' || cause_call, '') || ')' AS function,
          SUM(dur) AS blamed_ns
        FROM _stall_causes
        WHERE frame IS NOT NULL
        GROUP BY rank, function
      )
      ORDER BY rank, position
    )
    WHERE position <= 8
    GROUP BY rank
  ),
  _steps AS (
    SELECT rank, COUNT(*) AS steps, MIN(step_name) AS step_name, MIN(source) AS step_source
    FROM tt_steps!(${step_name})
    GROUP BY rank
  ),
  _ranks AS (
    SELECT DISTINCT rank FROM tt_gpu_busy WHERE ${rank} = '' OR rank = ${rank}
  )
SELECT
  r.rank, r.dp, r.cp, r.tp, r.stage,
  IFNULL(n.stalls, 0) AS stalls, IFNULL(n.stall_idle_ns, 0) AS stall_idle_ns,
  tt_frame_function(t.frame) AS top_function, t.frame AS top_frame,
  IFNULL(t.self_ns, 0) AS top_idle_ns, IFNULL(t.gaps, 0) AS top_gaps, x.next_functions,
  kd.stall_kinds,
  IFNULL(n.short_gaps, 0) AS short_gaps, IFNULL(n.short_idle_ns, 0) AS short_idle_ns,
  tt_frame_function(s.frame) AS short_top_function,
  IFNULL(st.step_name, ${step_name}) AS step_name,
  st.step_source,
  IFNULL(st.steps, 0) AS steps,
  -- Integer division: whole ns, rounded down.
  IIF(st.steps > 0, IFNULL(t.self_ns, 0) / st.steps, NULL) AS top_idle_per_step_ns
FROM _ranks AS k
JOIN tt_ranks AS r USING (rank)
LEFT JOIN _counts AS n USING (rank)
LEFT JOIN _top AS t ON t.rank = k.rank AND t.is_stall = 1
LEFT JOIN _top AS s ON s.rank = k.rank AND s.is_stall = 0
LEFT JOIN _steps AS st ON st.rank = k.rank
LEFT JOIN _next AS x ON x.rank = k.rank
LEFT JOIN _kinds AS kd ON kd.rank = k.rank
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank;
