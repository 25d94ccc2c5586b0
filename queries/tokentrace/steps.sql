-- tokentrace.steps: scheduler steps per rank, named by a Proton scope or a host frame.
--
-- A step is a slice whose name is the step name: a Proton CPU scope of the rank's GPU process
-- (exact name, e.g. `decode_step`), or a VizTracer frame of the rank's launching host thread
-- (exact name, or VizTracer's `name (file:line)` form, e.g. `scheduler_step`). A rank with matching
-- scopes uses those; otherwise its host frames. Only outermost matches count (a step nested in a
-- step of the same name is part of it). Steps are numbered per rank in time order.
--
-- A step's *window* runs from its start to the next step's start (the last step: to its own
-- end). The idle time between two steps, where host stalls happen before the next step's
-- launches, is therefore charged to the step that precedes it, so windows tile the rank's
-- profiled time from its first step on without holes. Times in ns.

INCLUDE PERFETTO MODULE tokentrace.ranks;

-- The steps named `step_name` of every rank.
-- Columns: `id` (row number, for `_interval_intersect!`), `rank`, `step_index` (1-based), `ts`
-- (step start), `dur` (window: to the next step's start; the last step: its own duration),
-- `step_dur` (the slice's own duration), `source` (`scope` or `host`).
CREATE PERFETTO MACRO tt_steps(
  -- The step name, a string expression.
  step_name Expr
)
RETURNS TableOrSubquery AS
(
  WITH
    _candidates AS (
      SELECT rp.rank, s.ts, s.dur, s.depth, 'scope' AS source
      FROM slice AS s
      JOIN thread_track AS tt ON s.track_id = tt.id
      JOIN thread AS t USING (utid)
      JOIN tt_rank_processes AS rp ON rp.upid = t.upid AND rp.role != 'host'
      WHERE s.name = $step_name AND IFNULL(s.category, '') != 'kernel' AND s.dur >= 0
      UNION ALL
      SELECT r.rank, s.ts, s.dur, s.depth, 'host' AS source
      FROM tt_ranks AS r
      JOIN thread_track AS tt ON tt.utid = r.host_main_utid
      JOIN slice AS s ON s.track_id = tt.id
      WHERE (s.name = $step_name OR s.name GLOB $step_name || ' (*') AND s.dur >= 0
    ),
    _chosen AS (
      SELECT c.*
      FROM _candidates AS c
      WHERE c.source = (
        SELECT MAX(c2.source) FROM _candidates AS c2 WHERE c2.rank = c.rank
      )
    ),
    _outermost AS (
      SELECT c.*
      FROM _chosen AS c
      WHERE NOT EXISTS (
        SELECT 1 FROM _chosen AS o
        WHERE o.rank = c.rank AND o.depth < c.depth
          AND o.ts <= c.ts AND o.ts + o.dur >= c.ts + c.dur
      )
    )
  SELECT
    ROW_NUMBER() OVER (ORDER BY rank, ts) AS id,
    rank,
    ROW_NUMBER() OVER (PARTITION BY rank ORDER BY ts, dur DESC) AS step_index,
    ts,
    IFNULL(LEAD(ts) OVER (PARTITION BY rank ORDER BY ts, dur DESC) - ts, dur) AS dur,
    dur AS step_dur,
    source
  FROM _outermost
);
