-- tokentrace.steps: scheduler steps per rank, named by a Proton scope or a host frame.
--
-- A step is a slice whose name is the step name: a Proton CPU scope of the rank's GPU process
-- (exact name, e.g. `decode_step`), or a VizTracer frame of the rank's launching host thread
-- (exact name, or VizTracer's `name (file:line)` form, e.g. `scheduler_step`). A rank with matching
-- scopes uses those; otherwise its host frames. Only outermost matches count (a step nested in a
-- step of the same name is part of it). Steps are numbered per rank in time order.
--
-- An empty step name means *find the step*, from the strongest evidence the rank has:
-- 1. slices named `decode_step` (scopes, else host frames);
-- 2. torch's profiler step markers `ProfilerStep#<n>` (`source` `profiler`): one step each;
-- 3. a user annotation of the torch profiler (`record_function`: SGLang's `execute_*` and
--    `step[...]`, vLLM's `execute_context_*`) that runs once per launch cycle
--    (`tt_auto_annotation_steps`, `source` `annotation`): names that differ only in their numbers
--    (batch sizes, token counts) are one annotation;
-- 4. the host frame `tt_auto_steps` picks for the rank (`source` `auto`): of the Python frames of
--    the launching thread called at least 8 times at one depth, those between two of whose
--    consecutive calls the host launched GPU work (a launch call of `tokentrace.launches`) in at
--    least 90 % of the intervals, the outermost (smallest depth), then the one with launches in
--    most intervals, then the most called, then the first to run; e.g. the scheduler's `schedule`
--    on serve_engine's traces. A frame called more often than once per step leaves intervals
--    without launches and loses to the once-per-step frame at its depth. Frames of the tensor
--    framework and the standard library never count (`_tt_is_library_frame!`): a model's layers
--    loop runs `ModuleList.__getitem__` once per layer, which looks like a step on a trace of one
--    forward pass (36 calls, one per layer, on a vLLM decode trace).
-- The step names of (2) and (3) are the annotation's name with each run of digits written `N`
-- (`ProfilerStep#N`): the name the steps share.
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

CREATE PERFETTO TABLE _tt_auto_step_called AS
SELECT rank, name, depth
FROM _tt_auto_step_frames
GROUP BY rank, name, depth
HAVING COUNT(*) >= 8;

-- (the library test on the groups, a table apart: in the grouping statement SQLite moves it
-- into the WHERE, once per call, which cost a third of the module on a serving trace)
CREATE PERFETTO TABLE _tt_auto_step_groups AS
SELECT rank, name, depth, ROW_NUMBER() OVER (ORDER BY rank, name, depth) AS gid
FROM _tt_auto_step_called
WHERE NOT _tt_is_library_frame!(name);

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
      c.launch_share
    FROM _tt_auto_step_scores AS c
    JOIN _tt_auto_step_groups AS g USING (gid)
  ),
  _ranked AS (
    SELECT
      *,
      ROW_NUMBER() OVER (
        PARTITION BY rank ORDER BY depth, launch_share DESC, calls DESC, first_ts, name
      ) AS pos
    FROM _scored
    WHERE launch_share >= _tt_auto_step_min_launch_share()
  )
SELECT rank, name, depth, calls, launch_share
FROM _ranked
WHERE pos = 1
ORDER BY rank;

-- The name an annotation's steps share: each run of digits written `N` (`ProfilerStep#12` ->
-- `ProfilerStep#N`; vLLM's `execute_context_1(888_788544)_generation_0(0)` ->
-- `execute_context_N(N_N)_generation_N(N)`: its numbers are the batch's, different every step).
-- (Digits to a placeholder, runs of it collapsed up to 64 digits long, then `N`.)
CREATE PERFETTO FUNCTION _tt_step_name_shape(
  -- The annotation's name.
  name STRING
)
RETURNS STRING AS
SELECT REPLACE(
  REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(
    REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE($name,
      '0', char(1)), '1', char(1)), '2', char(1)), '3', char(1)), '4', char(1)), '5', char(1)),
      '6', char(1)), '7', char(1)), '8', char(1)), '9', char(1)),
    char(1, 1), char(1)), char(1, 1), char(1)), char(1, 1), char(1)), char(1, 1), char(1)),
    char(1, 1), char(1)), char(1, 1), char(1)),
  char(1), 'N');

-- The torch profiler's host annotations of each rank (`record_function` ranges, category
-- `user_annotation`; their GPU copies, `gpu_user_annotation`, are left out): the lanes of the
-- rank's non-host processes, where the torch profiler's CPU events are laid out.
CREATE PERFETTO TABLE _tt_step_annotations AS
SELECT s.id, rp.rank, tt.utid, s.ts, s.dur, s.depth, s.name, _tt_step_name_shape(s.name) AS shape
FROM slice AS s
JOIN thread_track AS tt ON s.track_id = tt.id
JOIN thread AS t USING (utid)
JOIN tt_rank_processes AS rp ON rp.upid = t.upid AND rp.role != 'host'
WHERE s.category IN ('user_annotation', 'User Annotation') AND s.dur >= 0;

-- The launch calls the torch profiler recorded on those lanes: CUDA and HIP runtime and driver
-- calls that start GPU work (kernel and graph launches, copies, memsets), whether or not a flow
-- or a correlation id links them to their GPU work (a step is host time, so the call is enough).
CREATE PERFETTO TABLE _tt_step_runtime_launches AS
SELECT rp.rank, tt.utid, s.ts
FROM (
  SELECT ts, track_id, name FROM slice
  WHERE category IN ('cuda_runtime', 'cuda_driver', 'Runtime', 'Driver')
) AS s
JOIN thread_track AS tt ON s.track_id = tt.id
JOIN thread AS t USING (utid)
JOIN tt_rank_processes AS rp ON rp.upid = t.upid AND rp.role != 'host'
WHERE (s.name GLOB '*Launch*' OR s.name GLOB '*Memcpy*' OR s.name GLOB '*Memset*')
  -- (only the lanes with annotations are read: none on most of our own traces)
  AND tt.utid IN (SELECT utid FROM _tt_step_annotations);

-- Per annotation, the launch calls of its lane it encloses (start <= launch < end): the lane's
-- launches so far at its end less those at its start, one window pass over the lane's launches
-- and the annotations' two ends (at one time, an annotation's end or start sorts before a launch).
CREATE PERFETTO TABLE _tt_step_annotation_launches AS
WITH
  _events AS (
    SELECT utid, ts, 1 AS is_launch, NULL AS annotation, 0 AS is_end FROM _tt_step_runtime_launches
    UNION ALL
    SELECT utid, ts, 0, id, 0 FROM _tt_step_annotations
    UNION ALL
    SELECT utid, ts + dur, 0, id, 1 FROM _tt_step_annotations
  ),
  _counted AS (
    SELECT annotation, is_end,
      SUM(is_launch) OVER (
        PARTITION BY utid ORDER BY ts, is_launch ROWS UNBOUNDED PRECEDING
      ) AS launches_so_far
    FROM _events
  )
SELECT annotation, MAX(IIF(is_end, launches_so_far, 0)) - MAX(IIF(is_end, 0, launches_so_far))
  AS launches
FROM _counted
WHERE annotation IS NOT NULL
GROUP BY annotation;

-- The share of its lane's launch calls an annotation's instances must enclose together, and the
-- share of its instances that must enclose one: a step annotation is around the launch cycle
-- (the host's work for one step), not one op of it (SGLang's `step[DECODE bs=N]` inside
-- `execute_*`, or the per-op kernel scopes of a prefill, which enclose a third of a serving
-- loop's launches and none of its decode replays).
CREATE PERFETTO FUNCTION _tt_annotation_min_launch_cover()
RETURNS DOUBLE AS
SELECT 0.5;

-- Per rank, the user annotation that marks one step when no step name is given and the rank has
-- no `ProfilerStep#N` markers: of the annotation names (numbers written `N`) whose instances
-- enclose a launch call in at least 90 % of cases and together at least
-- `_tt_annotation_min_launch_cover()` of their lane's launch calls, the outermost (smallest
-- depth), then the one enclosing most launches, then the most called, then the first to run.
-- One instance is enough: a trace of one engine step (vLLM's and SGLang's `execute_*` around the
-- whole decode) has one step.
CREATE PERFETTO TABLE tt_auto_annotation_steps(
  -- Rank tag.
  rank STRING,
  -- The annotations' lane.
  utid JOINID(thread.id),
  -- The annotations' name, each run of digits written `N`.
  shape STRING,
  -- Their smallest depth on the lane.
  depth LONG,
  -- Their instances.
  calls LONG,
  -- The launch calls they enclose.
  launches LONG,
  -- Share of the lane's launch calls they enclose.
  launch_cover DOUBLE
) AS
WITH
  _lane_launches AS (
    SELECT utid, COUNT(*) AS n FROM _tt_step_runtime_launches GROUP BY utid
  ),
  _groups AS (
    SELECT
      a.rank, a.utid, a.shape, MIN(a.depth) AS depth, COUNT(*) AS calls, MIN(a.ts) AS first_ts,
      SUM(l.launches > 0) AS with_launch, SUM(l.launches) AS launches
    FROM _tt_step_annotations AS a
    JOIN _tt_step_annotation_launches AS l ON l.annotation = a.id
    WHERE a.name NOT GLOB 'ProfilerStep#*'
    GROUP BY a.rank, a.utid, a.shape
  ),
  _ranked AS (
    SELECT
      g.*, CAST(g.launches AS DOUBLE) / n.n AS launch_cover,
      ROW_NUMBER() OVER (
        PARTITION BY g.rank ORDER BY g.depth, g.launches DESC, g.calls DESC, g.first_ts, g.shape
      ) AS pos
    FROM _groups AS g
    JOIN _lane_launches AS n USING (utid)
    WHERE g.with_launch >= 0.9 * g.calls
      AND g.launches >= _tt_annotation_min_launch_cover() * n.n
  )
SELECT rank, utid, shape, depth, calls, launches, launch_cover
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
-- `step_dur` (the slice's own duration), `source` (`scope`, `host`, or for found steps `profiler`,
-- `annotation` or `auto`: see the top), `step_name` (the name the steps have), `open` (1: still
-- running when the profiler stopped, closed at the end of the host trace).
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
      UNION ALL
      -- torch's profiler step markers (any category but the GPU copies of annotations)
      SELECT rp.rank, s.ts, s.dur, s.depth, _tt_step_name_shape(s.name) AS name,
        'profiler' AS source, 0 AS open
      FROM slice AS s
      JOIN thread_track AS tt ON s.track_id = tt.id
      JOIN thread AS t USING (utid)
      JOIN tt_rank_processes AS rp ON rp.upid = t.upid
      WHERE $step_name = '' AND s.name GLOB 'ProfilerStep#*' AND s.dur >= 0
        AND IFNULL(s.category, '') NOT IN ('gpu_user_annotation', 'kernel', 'Kernel')
        AND rp.rank NOT IN (SELECT rank FROM _named)
      UNION ALL
      SELECT a.rank, s.ts, s.dur, s.depth, a.shape AS name, 'annotation' AS source, 0 AS open
      FROM tt_auto_annotation_steps AS a
      JOIN _tt_step_annotations AS s USING (rank, utid, shape)
      WHERE $step_name = '' AND a.rank NOT IN (SELECT rank FROM _named)
    ),
    -- Per rank the candidates of its best source: `scope`, `host`, `profiler`, `annotation`,
    -- `auto`, in that order.
    _sources AS MATERIALIZED (
      SELECT rank, source
      FROM (
        SELECT rank, source, ROW_NUMBER() OVER (
          PARTITION BY rank ORDER BY CASE source WHEN 'scope' THEN 0 WHEN 'host' THEN 1
            WHEN 'profiler' THEN 2 WHEN 'annotation' THEN 3 ELSE 4 END
        ) AS pos
        FROM (SELECT DISTINCT rank, source FROM _candidates)
      )
      WHERE pos = 1
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
-- `step_dur` (the slice's own duration), `source` (`scope`, `host`, or for found steps `profiler`,
-- `annotation` or `auto`: see the top), `step_name` (the name the steps have), `open` (1: closed
-- at the end of the host trace, see above). '' reads `_tt_found_steps` (built once, when
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
