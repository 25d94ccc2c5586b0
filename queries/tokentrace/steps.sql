-- tokentrace.steps: scheduler steps per rank, named by a Proton scope or a host frame.
--
-- A step is a slice whose name is the step name: a Proton CPU scope of the rank's GPU process
-- (exact name, e.g. `decode_step`), or a VizTracer frame of the rank's launching host thread
-- (exact name, or VizTracer's `name (file:line)` form, e.g. `scheduler_step`). A rank with matching
-- scopes uses those; otherwise its host frames. Only outermost matches count (a step nested in a
-- step of the same name is part of it). Steps are numbered per rank in time order.
--
-- An empty step name means *find the step*: slices named `decode_step` when the rank has them, else
-- the host frame `tt_auto_steps` picks for the rank: of the Python frames of the launching thread
-- called at least 8 times at one depth, those between two of whose consecutive calls the host
-- launched GPU work (a launch call of `tokentrace.launches`) in at least 90 % of the intervals, the
-- outermost (smallest depth), then the one with launches in most intervals, then not the standard
-- library's, then the most called, then the first to run; e.g. the scheduler's `schedule` on
-- serve_engine's traces. A frame called more often than once per step leaves intervals without
-- launches and loses to the once-per-step frame at its depth.
--
-- A step still running when the profiler stopped (a `B` without its `E`: profilers are
-- stopped from another thread, mid-step) is closed at the end of its rank's host trace
-- (`tt_host_windows`) and marked `open`.
--
-- A step's *window* runs from its start to the next step's start (the last step: to its own
-- end). The idle time between two steps, where host stalls happen before the next step's
-- launches, is therefore charged to the step that precedes it, so windows tile the rank's
-- profiled time from its first step on without holes. Times in ns.

INCLUDE PERFETTO MODULE tokentrace.host_frames;
INCLUDE PERFETTO MODULE tokentrace.launches;

-- The Python frames of each rank's launching thread, and each (name, depth) called at least 8
-- times there with a number (`gid`). The steps below are separate tables: one window pass per
-- statement over integer keys (a chain of window CTEs in one statement cost 2.5x as much and
-- grew faster than the trace).
CREATE PERFETTO TABLE _tt_auto_step_frames AS
SELECT r.rank, s.ts, s.depth, s.name
FROM tt_ranks AS r
JOIN thread_track AS tt ON tt.utid = r.host_main_utid
JOIN slice AS s ON s.track_id = tt.id
WHERE s.dur >= 0 AND s.name GLOB '* (*';

CREATE PERFETTO TABLE _tt_auto_step_groups AS
SELECT rank, name, depth, ROW_NUMBER() OVER (ORDER BY rank, name, depth) AS gid
FROM _tt_auto_step_frames
GROUP BY rank, name, depth
HAVING COUNT(*) >= 8;

-- The winner is the outermost qualifying frame, so the groups are scored in two passes: those at
-- depth <= `_tt_auto_step_shallow_depth()` first, the deeper ones only for ranks where none of
-- those qualifies (launches in >= 90 % of the intervals). The rows are the same as one pass over
-- every group's calls, as a deeper group never beats a qualifying shallower one; the shallow frames
-- are a small part of a serving loop's, and the window pass over the frames and the launch calls is
-- the module's main cost.
CREATE PERFETTO FUNCTION _tt_auto_step_shallow_depth()
RETURNS LONG AS
SELECT 4;

-- The share of intervals with a launch call a step frame needs.
CREATE PERFETTO FUNCTION _tt_auto_step_min_launch_share()
RETURNS DOUBLE AS
SELECT 0.9;

-- The calls of the groups in `groups` (rank, name, depth, gid) and the launch calls of their
-- ranks in time order (a launch at a call's start counts as before it), with the launches so
-- far: the count of the rank's launch calls up to the call, whatever else is in the union.
CREATE PERFETTO MACRO _tt_auto_step_counted_of(
  -- The frame groups to score.
  groups TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  SELECT
    gid, ts, is_launch,
    SUM(is_launch) OVER (
      PARTITION BY rank ORDER BY ts, is_launch DESC ROWS UNBOUNDED PRECEDING
    ) AS launches_before
  FROM (
    SELECT rank, ts, NULL AS gid, 1 AS is_launch
    FROM tt_launch_calls
    WHERE rank IN (SELECT DISTINCT rank FROM $groups)
    UNION ALL
    SELECT m.rank, m.ts, g.gid, 0 AS is_launch
    FROM _tt_auto_step_frames AS m
    JOIN $groups AS g USING (rank, name, depth)
  )
);

-- Per frame group: its calls, first call, and the share of the intervals between consecutive
-- calls with at least one launch call (the first call opens no interval). The launches so far
-- never decrease along a group's calls, so the intervals with a launch are the times that count
-- grows: its distinct values over the group's calls, less one (no window pass by group).
CREATE PERFETTO MACRO _tt_auto_step_scores_of(
  -- Rows of `_tt_auto_step_counted_of!`.
  counted TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  SELECT
    gid, COUNT(*) AS calls, MIN(ts) AS first_ts,
    CAST(COUNT(DISTINCT launches_before) - 1 AS DOUBLE) / (COUNT(*) - 1) AS launch_share
  FROM $counted
  WHERE is_launch = 0
  GROUP BY gid
);

CREATE PERFETTO TABLE _tt_auto_step_shallow_groups AS
SELECT * FROM _tt_auto_step_groups WHERE depth <= _tt_auto_step_shallow_depth();

-- (each window pass a table of its own: one window pass per statement, see above)
CREATE PERFETTO TABLE _tt_auto_step_shallow_counted AS
SELECT * FROM _tt_auto_step_counted_of!(_tt_auto_step_shallow_groups);

CREATE PERFETTO TABLE _tt_auto_step_shallow_scores AS
SELECT * FROM _tt_auto_step_scores_of!(_tt_auto_step_shallow_counted);

-- The deeper groups of the ranks without a qualifying shallow one.
CREATE PERFETTO TABLE _tt_auto_step_deep_groups AS
SELECT * FROM _tt_auto_step_groups
WHERE depth > _tt_auto_step_shallow_depth()
  AND rank NOT IN (
    SELECT g.rank
    FROM _tt_auto_step_shallow_scores AS c
    JOIN _tt_auto_step_groups AS g USING (gid)
    WHERE c.launch_share >= _tt_auto_step_min_launch_share()
  );

CREATE PERFETTO TABLE _tt_auto_step_deep_counted AS
SELECT * FROM _tt_auto_step_counted_of!(_tt_auto_step_deep_groups);

CREATE PERFETTO TABLE _tt_auto_step_scores AS
SELECT * FROM _tt_auto_step_shallow_scores
UNION ALL
SELECT * FROM _tt_auto_step_scores_of!(_tt_auto_step_deep_counted);

-- Per rank, the host frame that marks one scheduler step when no step name is given.
CREATE PERFETTO TABLE tt_auto_steps(
  -- Rank tag.
  rank STRING,
  -- The frame's VizTracer name (`function (file:line)`).
  name STRING,
  -- Its depth on the launching thread.
  depth LONG,
  -- Its calls at that depth.
  calls LONG,
  -- Share of the intervals between consecutive calls with at least one launch call.
  launch_share DOUBLE
) AS
WITH
  _scored AS (
    SELECT
      g.rank, g.name, g.depth, c.calls, c.first_ts,
      tt_is_stdlib_frame(g.name) AS is_stdlib,
      c.launch_share
    FROM _tt_auto_step_scores AS c
    JOIN _tt_auto_step_groups AS g USING (gid)
  ),
  _ranked AS (
    SELECT
      *,
      ROW_NUMBER() OVER (
        PARTITION BY rank ORDER BY depth, launch_share DESC, is_stdlib, calls DESC, first_ts, name
      ) AS pos
    FROM _scored
    WHERE launch_share >= _tt_auto_step_min_launch_share()
  )
SELECT rank, name, depth, calls, launch_share
FROM _ranked
WHERE pos = 1
ORDER BY rank;

-- Where each rank's host trace ends: the last end of an outermost slice on any thread of its
-- host process (the profiler was still recording then, so a step left open ran until then).
CREATE PERFETTO TABLE _tt_host_trace_ends(
  -- Rank tag.
  rank STRING,
  -- The last end, ns.
  end_ts TIMESTAMP
) AS
SELECT r.rank, MAX(s.ts + s.dur) AS end_ts
FROM slice AS s
JOIN thread_track AS tt ON s.track_id = tt.id
JOIN thread AS t USING (utid)
JOIN tt_ranks AS r ON r.host_upid = t.upid
WHERE s.depth = 0 AND s.dur >= 0
GROUP BY r.rank
ORDER BY r.rank;

-- The duration of a slice, an unfinished one (dur -1) closed at `end_ts` (never negative).
CREATE PERFETTO MACRO _tt_closed_dur(
  -- The slice's duration.
  dur Expr,
  -- Its start.
  ts Expr,
  -- Where an unfinished slice ends.
  end_ts Expr
)
RETURNS Expr AS
IIF($dur < 0, MAX($end_ts - $ts, 0), $dur);

-- The steps named `step_name` of every rank ('' : found, see above), computed.
-- Columns: `id` (row number, for `_interval_intersect!`), `rank`, `step_index` (1-based), `ts`
-- (step start), `dur` (window: to the next step's start; the last step: its own duration),
-- `step_dur` (the slice's own duration), `source` (`scope`, `host`, or `auto` for a found host
-- frame), `step_name` (the name the steps have), `open` (1: still running when the profiler
-- stopped, closed at the end of the host trace).
CREATE PERFETTO MACRO _tt_steps_computed(
  -- The step name, a string expression.
  step_name Expr
)
RETURNS TableOrSubquery AS
(
  WITH
    _named AS (
      SELECT rp.rank, s.ts, s.dur, s.depth, s.name, 'scope' AS source, 0 AS open
      FROM slice AS s
      JOIN thread_track AS tt ON s.track_id = tt.id
      JOIN thread AS t USING (utid)
      JOIN tt_rank_processes AS rp ON rp.upid = t.upid AND rp.role != 'host'
      WHERE s.name = IIF($step_name = '', 'decode_step', $step_name)
        AND IFNULL(s.category, '') != 'kernel' AND s.dur >= 0
      UNION ALL
      -- (the exact name and the `name (file:line)` form apart: one simple name filter each, which
      -- the slice table applies to its distinct names, not to every slice in SQL)
      SELECT r.rank, s.ts, _tt_closed_dur!(s.dur, s.ts, w.end_ts) AS dur, s.depth, s.name,
        'host' AS source, s.dur < 0 AS open
      FROM tt_ranks AS r
      JOIN _tt_host_trace_ends AS w USING (rank)
      JOIN thread_track AS tt ON tt.utid = r.host_main_utid
      JOIN slice AS s ON s.track_id = tt.id
      WHERE s.name = IIF($step_name = '', 'decode_step', $step_name)
      UNION ALL
      SELECT r.rank, s.ts, _tt_closed_dur!(s.dur, s.ts, w.end_ts) AS dur, s.depth, s.name,
        'host' AS source, s.dur < 0 AS open
      FROM tt_ranks AS r
      JOIN _tt_host_trace_ends AS w USING (rank)
      JOIN thread_track AS tt ON tt.utid = r.host_main_utid
      JOIN slice AS s ON s.track_id = tt.id
      WHERE s.name GLOB IIF($step_name = '', 'decode_step', $step_name) || ' (*'
        AND s.name != IIF($step_name = '', 'decode_step', $step_name)
    ),
    _candidates AS (
      SELECT * FROM _named
      UNION ALL
      SELECT a.rank, s.ts, _tt_closed_dur!(s.dur, s.ts, w.end_ts) AS dur, s.depth, s.name,
        'auto' AS source, s.dur < 0 AS open
      FROM tt_auto_steps AS a
      JOIN tt_ranks AS r USING (rank)
      JOIN _tt_host_trace_ends AS w USING (rank)
      JOIN thread_track AS tt ON tt.utid = r.host_main_utid
      JOIN slice AS s ON s.track_id = tt.id AND s.name = a.name AND s.depth = a.depth
      WHERE $step_name = '' AND a.rank NOT IN (SELECT rank FROM _named)
    ),
    -- Per rank the candidates of its best source (`scope` over `host` over `auto`).
    _sources AS MATERIALIZED (
      SELECT rank, MAX(source) AS source FROM _candidates GROUP BY rank
    ),
    _chosen AS MATERIALIZED (
      SELECT c.*
      FROM _candidates AS c
      JOIN _sources AS b USING (rank, source)
    ),
    -- A step is dropped when a step at a smaller depth encloses it (starts no later, ends no
    -- earlier): per depth the steps use, the latest end of the shallower steps started so far,
    -- one window pass instead of a test against every other step.
    _depths AS (
      SELECT DISTINCT rank, depth AS at_depth FROM _chosen
    ),
    _enclosing AS (
      SELECT
        c.*, d.at_depth,
        MAX(IIF(c.depth < d.at_depth, c.ts + c.dur, NULL)) OVER (
          PARTITION BY c.rank, d.at_depth ORDER BY c.ts RANGE UNBOUNDED PRECEDING
        ) AS outer_end
      FROM _chosen AS c
      JOIN _depths AS d USING (rank)
    ),
    _outermost AS (
      SELECT rank, ts, dur, depth, name, source, open
      FROM _enclosing
      WHERE depth = at_depth AND (outer_end IS NULL OR outer_end < ts + dur)
    )
  SELECT
    ROW_NUMBER() OVER (ORDER BY rank, ts) AS id,
    rank,
    ROW_NUMBER() OVER (PARTITION BY rank ORDER BY ts, dur DESC) AS step_index,
    ts,
    IFNULL(LEAD(ts) OVER (PARTITION BY rank ORDER BY ts, dur DESC) - ts, dur) AS dur,
    dur AS step_dur,
    source,
    name AS step_name,
    open
  FROM _outermost
);

-- The found steps (step name ''), computed once when the module is included: the default of
-- every query that reads steps.
CREATE PERFETTO TABLE _tt_found_steps AS
SELECT id, rank, step_index, ts, dur, step_dur, source, step_name, open
FROM _tt_steps_computed!('')
ORDER BY id;

-- The steps named `step_name` of every rank ('' : found, see above).
-- Columns: `id` (row number, for `_interval_intersect!`), `rank`, `step_index` (1-based), `ts`
-- (step start), `dur` (window: to the next step's start; the last step: its own duration),
-- `step_dur` (the slice's own duration), `source` (`scope`, `host`, or `auto` for a found host
-- frame), `step_name` (the name the steps have), `open` (1: closed at the end of the host
-- trace, see above). '' reads `_tt_found_steps` (built once, when
-- the module is included); any other name is computed by `_tt_steps_computed!`.
CREATE PERFETTO MACRO tt_steps(
  -- The step name, a string expression.
  step_name Expr
)
RETURNS TableOrSubquery AS
(
  SELECT id, rank, step_index, ts, dur, step_dur, source, step_name, open
  FROM _tt_found_steps
  WHERE $step_name = ''
  UNION ALL
  SELECT id, rank, step_index, ts, dur, step_dur, source, step_name, open
  FROM _tt_steps_computed!($step_name)
  WHERE $step_name != ''
);
