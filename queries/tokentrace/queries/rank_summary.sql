-- tokentrace.queries.rank_summary: the rows of the bundled query `rank_summary`
-- (`queries/rank_summary.sql`).

INCLUDE PERFETTO MODULE tokentrace.causes;
INCLUDE PERFETTO MODULE tokentrace.gaps;
INCLUDE PERFETTO MODULE tokentrace.stalls;
INCLUDE PERFETTO MODULE tokentrace.steps;
INCLUDE PERFETTO MODULE tokentrace.gpu_waits;
INCLUDE PERFETTO MODULE tokentrace.queries.idle_budget;

-- Per rank, the top stall cause, the shorter host gaps and the cost per step.
--
-- One row per rank with kernels (the ranks of `gpu_windows`; `tokentrace analyze` shows the two
-- side by side). Stalls as in `gap_causes`: steady gaps with by_host = 1 of at least
-- stall_min_us where the engine was not waiting for work (those are counted apart, `no_work_*`),
-- each with its own cause (`tt_gap_causes!`: kind, frame and the part of the
-- stall it explains, cause_ns). A **cause** is a (kind, frame) pair; causes are ranked by the
-- GPU idle they explain in their stalls (summed cause_ns; ties: the stalls' summed length, more
-- stalls, then frame and kind): a cause that explains little of its stall (a gap from before
-- the host trace, charged to the frame open at its end) ranks by that little, not by the gap's
-- length. The **top stall cause** is the first: the
-- headline, and the first entry of `next_functions`, so the two always agree. A frame that sits
-- in many stalls without causing them (a GIL victim, a replay call, a leaf under the real
-- culprit) is no stall's cause and so never the headline; the leaf frame with the most self
-- time in the top cause's stalls and its C call are detail columns. The **shorter host gaps**
-- are the rank's other steady host-caused gaps of at least min_gap_us (`host_stall_profile`
-- with max_gap_us = stall_min_us and host_only): their summed length and the frame with the most
-- self time in them. Steps as in `step_breakdown` (slices named step_name, `tokentrace.steps`);
-- the cost per step is the top cause's idle time over the rank's steps. All times in ns.
CREATE PERFETTO FUNCTION tt_query_rank_summary(
  -- Shortest gap counted among the shorter host gaps (>= 0).
  min_gap_ns DURATION,
  -- Longest gap classed `launch_overhead` (>= 0).
  launch_overhead_ns DURATION,
  -- Gaps before the rank's first this-many kernels are `startup` (>= 0; see `gpu_gaps`).
  startup_kernels LONG,
  -- Steady host-caused gaps at least this long are stalls (>= 0).
  stall_min_ns DURATION,
  -- Scope or host frame (function) name that marks a step; '' finds it: `decode_step` where
  -- present, else the once-per-step host frame (`tt_auto_steps`).
  step_name STRING,
  -- Only this rank tag (e.g. 'TP1'); '' = all ranks.
  rank STRING
)
RETURNS TABLE(
  -- Rank tag, e.g. `TP1` (process name for raw traces).
  rank STRING,
  -- The rank's stalls.
  stalls LONG,
  -- Their summed length.
  stall_idle_ns DURATION,
  -- The top stall cause's function (NULL without stalls or without a stall whose cause names a
  -- frame).
  top_function STRING,
  -- Its full VizTracer frame name, `func (file:line)`.
  top_frame STRING,
  -- Its cause kind (`busy`, `blocking`, `gil`, `sync`, `gc`, `unknown`; see `gap_causes`).
  top_kind STRING,
  -- Detail: the C call behind it in most of its stall time (NULL for busy Python).
  top_call STRING,
  -- Detail: the thread that caused it in most of its stall time (for `gil` the thread holding the
  -- GIL).
  top_thread STRING,
  -- Detail: the function with the most self time in the top cause's stalls (the frame the host was
  -- in, e.g. a leaf under the cause).
  top_leaf_function STRING,
  -- GPU idle it explains: cause_ns summed over the stalls it causes (0 when none).
  top_idle_ns DURATION,
  -- Those stalls' summed length (0 when none).
  top_stall_ns DURATION,
  -- The stalls it causes (0 when none).
  top_gaps LONG,
  -- The rank's stall causes as `function (file:line) (kind [held by thread] [in call])`, ranked as
  -- the top cause (the top cause first), at most eight, comma-separated; thread and call are those
  -- of most of the idle the cause explains; NULL when none.
  next_functions STRING,
  -- The cause kinds of the rank's stalls with their counts, the kind explaining the most stall time
  -- first (`gc 2, blocking 3, gil 2, ...`); NULL without stalls.
  stall_kinds STRING,
  -- The rank's shorter host gaps.
  short_gaps LONG,
  -- Their summed length.
  short_idle_ns DURATION,
  -- The function with the most self time in them.
  short_top_function STRING,
  -- The name of the rank's steps (found when step_name is ''; the given step_name when none
  -- matched).
  step_name STRING,
  -- `scope`, `host` or `auto` (a found host frame; NULL: no step).
  step_source STRING,
  -- The rank's steps (0: no slice is named step_name).
  steps LONG,
  -- top_idle_ns / steps, rounded down (NULL without steps).
  top_idle_per_step_ns DURATION,
  -- Steady host-caused gaps of at least stall_min_us where the engine waited for work (cause
  -- `no_work`): no stalls.
  no_work_gaps LONG,
  -- Their summed length.
  no_work_idle_ns DURATION,
  -- The function their causes name for most of that length (the frame of the thread producing work,
  -- else of the wait); NULL without them.
  no_work_function STRING,
  -- Its thread.
  no_work_thread STRING,
  -- Stream-capture begin calls on the rank (`cudaStreamBeginCapture`, `hipStreamBeginCapture`;
  -- `tt_rank_graph_calls`). Gaps that overlap a capture are no stalls and no shorter host gaps.
  capture_calls LONG,
  -- Graph launch calls on the rank (`cudaGraphLaunch`, `cuGraphLaunch`, `hipGraphLaunch`).
  graph_launch_calls LONG,
  -- `graph_capture` when the rank captures CUDA graphs and replays none (no graph launch call, no
  -- kernel of a replay): a graph-capture trace, whose captured kernels never ran; else `run`.
  trace_kind STRING,
  -- The `idle_budget` category holding most of the rank's GPU idle (ties: by name): what the
  -- answer leads with. NULL without idle.
  top_category STRING,
  -- Its idle, ns.
  top_category_ns DURATION,
  -- Its share of the rank's GPU idle.
  top_category_share DOUBLE,
  -- What costs most inside it: for a `host_*` category, its top stall cause (`function (kind in
  -- call)`), else the frame of most self time in the shorter host gaps (`mostly function`); for
  -- `gpu_wait`, what the longest GPU-side wait waited on (its `tokentrace.gpu_waits` label less
  -- `gpu_wait: `); for `no_work`, the frame that waited for work; NULL for the others.
  top_category_cause STRING
)
AS
-- (A CTE read more than once is MATERIALIZED: otherwise the engine may evaluate it once per
-- reader, the idle budget's table function included.)
WITH
  -- The steady host-caused gaps, each a stall or a shorter host gap: one frame intersection
  -- serves both (a gap is at least min_gap_us unless it is a stall).
  -- A gap that overlaps a CUDA-graph stream capture is set-up: the kernels launched inside the
  -- capture are recorded, not run, so the host was not late (no stall, no shorter host gap).
  _captures AS MATERIALIZED (
    SELECT rank, ts, ts + dur AS end_ts FROM tt_capture_windows WHERE $rank = '' OR rank = $rank
  ),
  _gaps AS MATERIALIZED (
    SELECT g.*, IIF(g.dur >= $stall_min_ns, 1, 0) AS is_stall
    FROM tt_gpu_gap_rows(MIN($min_gap_ns, $stall_min_ns), $launch_overhead_ns,
                         $startup_kernels) AS g
    WHERE ($rank = '' OR g.rank = $rank) AND g.phase = 'steady' AND g.by_host = 1
      AND NOT EXISTS (
        SELECT 1 FROM _captures AS c
        WHERE c.rank = g.rank AND c.ts < g.ts + g.dur AND g.ts < c.end_ts
      )
  ),
  -- Each long gap's own cause (as in gap_causes); those where the engine waited for work
  -- (`no_work`) are no stalls: no host code could have filled them.
  -- (gap sets are CTEs, not subquery arguments: see `_tt_cached_source!`)
  _stall_gaps AS MATERIALIZED (SELECT * FROM _gaps WHERE is_stall = 1),
  _short_gaps AS MATERIALIZED (SELECT * FROM _gaps WHERE is_stall = 0),
  _long_causes AS MATERIALIZED (
    SELECT g.rank, g.id AS gap_id, c.cause_frame AS frame, c.cause_kind, c.cause_call,
      c.cause_thread, g.dur, IFNULL(c.cause_ns, 0) AS cause_ns
    FROM tt_gap_causes!(_stall_gaps) AS c
    JOIN _gaps AS g ON g.id = c.gap_id
  ),
  _stall_causes AS MATERIALIZED (
    SELECT * FROM _long_causes WHERE IFNULL(cause_kind, '') != 'no_work'
  ),
  _counts AS (
    SELECT
      g.rank,
      COUNT(s.gap_id) AS stalls, SUM(IIF(s.gap_id IS NOT NULL, g.dur, 0)) AS stall_idle_ns,
      SUM(1 - g.is_stall) AS short_gaps, SUM(IIF(g.is_stall = 0, g.dur, 0)) AS short_idle_ns
    FROM _gaps AS g
    LEFT JOIN _stall_causes AS s ON s.gap_id = g.id
    GROUP BY g.rank
  ),
  _kinds AS (
    SELECT rank, GROUP_CONCAT(label, ', ') AS stall_kinds
    FROM (
      SELECT rank, cause_kind || ' ' || COUNT(*) AS label, SUM(cause_ns) AS kind_ns
      FROM _stall_causes
      GROUP BY rank, cause_kind
      ORDER BY rank, kind_ns DESC, cause_kind
    )
    GROUP BY rank
  ),
  -- A cause's detail (C call, thread): the value of most of the idle it explains (NULL counts:
  -- busy Python has no call).
  _details AS (
    SELECT *,
      ROW_NUMBER() OVER (
        PARTITION BY rank, cause_kind, frame
        ORDER BY detail_ns DESC, detail_stall_ns DESC, cause_call IS NULL, cause_call,
          cause_thread
      ) AS detail_rank
    FROM (
      SELECT rank, cause_kind, frame, cause_call, cause_thread,
        SUM(cause_ns) AS detail_ns, SUM(dur) AS detail_stall_ns, COUNT(*) AS detail_stalls
      FROM _stall_causes
      WHERE frame IS NOT NULL
      GROUP BY rank, cause_kind, frame, cause_call, cause_thread
    )
  ),
  -- The causes: one per (kind, frame), ranked by the GPU idle they explain, with their detail.
  -- Stalls whose cause names no frame are counted in stall_kinds but rank no cause. (The
  -- causes' sums add up their details' sums: each part of the report that reads the stalls'
  -- causes plans the causes' statement again, so they are read once here, not twice.)
  _named AS MATERIALIZED (
    SELECT
      rank, cause_kind, frame, idle_ns, stall_ns, stalls,
      ROW_NUMBER() OVER (
        PARTITION BY rank ORDER BY idle_ns DESC, stall_ns DESC, stalls DESC, frame, cause_kind
      ) AS position,
      cause_call, cause_thread
    FROM (
      SELECT
        rank, cause_kind, frame, cause_call, cause_thread, detail_rank,
        SUM(detail_ns) OVER w AS idle_ns, SUM(detail_stall_ns) OVER w AS stall_ns,
        SUM(detail_stalls) OVER w AS stalls
      FROM _details
      WINDOW w AS (PARTITION BY rank, cause_kind, frame)
    )
    WHERE detail_rank = 1
  ),
  _top AS MATERIALIZED (
    SELECT * FROM _named WHERE position = 1
  ),
  _next AS (
    SELECT rank, GROUP_CONCAT(label, ', ') AS next_functions
    FROM (
      SELECT
        rank, position,
        frame || ' (' || cause_kind
          || IIF(cause_kind = 'gil', ' held by ' || cause_thread, '')
          || IIF(cause_call IS NOT NULL, ' in ' || cause_call, '') || ')' AS label
      FROM _named
      WHERE position <= 8
      ORDER BY rank, position
    )
    GROUP BY rank
  ),
  -- Frames with self time, summed over the top cause's stalls (the leaf detail) and over the
  -- shorter host gaps (one sum per gap set, not one sum keyed by the set), each set's leaf (the
  -- most self time) apart: one table of both, read twice, planned the causes twice. The stalls'
  -- frames are read for the stalls, then kept for the top cause's: given a gap set that depends
  -- on the causes, the frame macros would plan the causes' statement inside theirs.
  _stall_frames AS (
    SELECT f.rank, f.frame, COUNT(DISTINCT f.gap_id) AS gaps,
      SUM(f.self_ns) AS self_ns, SUM(f.total_ns) AS total_ns
    FROM tt_gap_frames!(_stall_gaps) AS f
    JOIN _stall_causes AS s ON s.gap_id = f.gap_id
    JOIN _top AS t ON t.rank = s.rank AND t.cause_kind = s.cause_kind AND t.frame = s.frame
    GROUP BY f.rank, f.frame
  ),
  _stall_leaf AS MATERIALIZED (
    SELECT * FROM (
      SELECT
        *,
        ROW_NUMBER() OVER (PARTITION BY rank ORDER BY self_ns DESC, total_ns DESC, frame)
          AS frame_rank
      FROM _stall_frames
    )
    WHERE frame_rank = 1
  ),
  _short_leaf AS MATERIALIZED (
    SELECT * FROM (
      SELECT
        *,
        ROW_NUMBER() OVER (PARTITION BY rank ORDER BY self_ns DESC, total_ns DESC, frame)
          AS frame_rank
      FROM tt_gap_frame_sums!(_short_gaps)
    )
    WHERE frame_rank = 1
  ),
  _steps AS (
    SELECT rank, COUNT(*) AS steps, MIN(step_name) AS step_name, MIN(source) AS step_source
    FROM tt_steps!($step_name)
    GROUP BY rank
  ),
  _ranks AS (
    SELECT DISTINCT rank FROM tt_gpu_busy WHERE $rank = '' OR rank = $rank
  ),
  -- Graph use: replayed kernels (linked to a graph launch) and the CUDA-graph calls by name.
  _replayed AS (
    SELECT rank, COUNT(*) AS graph_kernels FROM tt_kernel_launches WHERE kind = 'graph'
    GROUP BY rank
  ),
  -- The long gaps where the engine waited for work, and what kept most of them waiting: the
  -- frame (and thread) their causes name most, by length.
  _starved AS (
    SELECT rank, COUNT(*) AS gaps, SUM(dur) AS idle_ns FROM _long_causes
    WHERE cause_kind = 'no_work' GROUP BY rank
  ),
  -- The category that explains the most idle, with the same parameters as `idle_budget`.
  _budget AS MATERIALIZED (
    SELECT * FROM (
      SELECT rank, category, idle_ns, share,
        ROW_NUMBER() OVER (PARTITION BY rank ORDER BY idle_ns DESC, category) AS pos
      FROM tt_query_idle_budget($min_gap_ns, $launch_overhead_ns, $startup_kernels, $step_name,
                                $rank)
      WHERE idle_ns > 0
    )
    WHERE pos = 1
  ),
  -- The longest steady GPU-side wait of each rank, and what it waited on.
  _longest_wait_gaps AS MATERIALIZED (
    SELECT * FROM (
      SELECT g.*, ROW_NUMBER() OVER (PARTITION BY g.rank ORDER BY g.dur DESC, g.ts) AS pos
      FROM tt_gpu_gap_rows($min_gap_ns, $launch_overhead_ns, $startup_kernels) AS g
      WHERE ($rank = '' OR g.rank = $rank) AND g.gap_class = 'gpu_queued' AND g.phase = 'steady'
    )
    WHERE pos = 1
  ),
  _longest_wait AS (
    -- (the label without its `gpu_wait: `: the category names it)
    SELECT g.rank, SUBSTR(w.label, LENGTH('gpu_wait: ') + 1) AS label
    FROM tt_gpu_wait_causes!(_longest_wait_gaps) AS w
    JOIN _longest_wait_gaps AS g ON g.id = w.gap_id
  ),
  _category_stall AS (
    SELECT * FROM (
      SELECT n.rank, tt_frame_function(n.frame) || ' (' || n.cause_kind
          || IIF(n.cause_call IS NOT NULL, ' in ' || n.cause_call, '') || ')' AS cause,
        ROW_NUMBER() OVER (PARTITION BY n.rank ORDER BY n.position) AS pos
      FROM _named AS n
      JOIN _budget AS b ON b.rank = n.rank AND b.category = 'host_' || n.cause_kind
    )
    WHERE pos = 1
  ),
  _starved_by AS (
    SELECT * FROM (
      SELECT rank, frame, cause_thread,
        ROW_NUMBER() OVER (PARTITION BY rank ORDER BY SUM(dur) DESC, frame) AS pos
      FROM _long_causes
      WHERE cause_kind = 'no_work'
      GROUP BY rank, frame, cause_thread
    )
    WHERE pos = 1
  )
SELECT
  r.rank,
  IFNULL(n.stalls, 0) AS stalls, IFNULL(n.stall_idle_ns, 0) AS stall_idle_ns,
  tt_frame_function(t.frame) AS top_function, t.frame AS top_frame, t.cause_kind AS top_kind,
  t.cause_call AS top_call, t.cause_thread AS top_thread,
  tt_frame_function(lf.frame) AS top_leaf_function,
  IFNULL(t.idle_ns, 0) AS top_idle_ns, IFNULL(t.stall_ns, 0) AS top_stall_ns,
  IFNULL(t.stalls, 0) AS top_gaps, x.next_functions,
  kd.stall_kinds,
  IFNULL(n.short_gaps, 0) AS short_gaps, IFNULL(n.short_idle_ns, 0) AS short_idle_ns,
  tt_frame_function(s.frame) AS short_top_function,
  IFNULL(st.step_name, $step_name) AS step_name,
  st.step_source,
  IFNULL(st.steps, 0) AS steps,
  -- Integer division: whole ns, rounded down.
  IIF(st.steps > 0, IFNULL(t.idle_ns, 0) / st.steps, NULL) AS top_idle_per_step_ns,
  IFNULL(sv.gaps, 0) AS no_work_gaps, IFNULL(sv.idle_ns, 0) AS no_work_idle_ns,
  tt_frame_function(sb.frame) AS no_work_function, sb.cause_thread AS no_work_thread,
  IFNULL(gc.capture_calls, 0) AS capture_calls,
  IFNULL(gc.launch_calls, 0) AS graph_launch_calls,
  IIF(IFNULL(gc.capture_calls, 0) > 0 AND IFNULL(gc.launch_calls, 0) = 0
        AND IFNULL(rp.graph_kernels, 0) = 0,
      'graph_capture', 'run') AS trace_kind,
  b.category AS top_category, b.idle_ns AS top_category_ns, b.share AS top_category_share,
  CASE
    WHEN b.category GLOB 'host_*'
      THEN IFNULL(cs.cause, 'mostly ' || tt_frame_function(s.frame))
    WHEN b.category = 'gpu_wait' THEN lw.label
    WHEN b.category = 'no_work' THEN tt_frame_function(sb.frame)
  END AS top_category_cause
FROM _ranks AS k
JOIN tt_ranks AS r USING (rank)
LEFT JOIN _counts AS n USING (rank)
LEFT JOIN _top AS t ON t.rank = k.rank
LEFT JOIN _stall_leaf AS lf ON lf.rank = k.rank
LEFT JOIN _short_leaf AS s ON s.rank = k.rank
LEFT JOIN _steps AS st ON st.rank = k.rank
LEFT JOIN _next AS x ON x.rank = k.rank
LEFT JOIN _kinds AS kd ON kd.rank = k.rank
LEFT JOIN _starved AS sv ON sv.rank = k.rank
LEFT JOIN _starved_by AS sb ON sb.rank = k.rank
LEFT JOIN tt_rank_graph_calls AS gc ON gc.rank = k.rank
LEFT JOIN _replayed AS rp ON rp.rank = k.rank
LEFT JOIN _budget AS b ON b.rank = k.rank
LEFT JOIN _longest_wait AS lw ON lw.rank = k.rank
LEFT JOIN _category_stall AS cs ON cs.rank = k.rank
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank;
