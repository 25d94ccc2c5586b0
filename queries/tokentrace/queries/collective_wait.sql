-- tokentrace.queries.collective_wait: the rows of the bundled query `collective_wait`
-- (`queries/collective_wait.sql`), its per-rank map part.

INCLUDE PERFETTO MODULE tokentrace.causes;
INCLUDE PERFETTO MODULE tokentrace.gaps;

-- How long did each rank wait inside collectives for a late rank, and why was that rank late?
--
-- This function gives the per-rank rows (the map) of the cross-rank query `collective_wait`: its
-- reduce, after `-- @reduce` in `queries/collective_wait.sql`, compares them across ranks and
-- declares the query's columns.
--
-- Collective kernels match `name_glob` (NCCL's device kernels by default) and are numbered per
-- rank in time order; the k-th of every rank is one collective (as in `collective_skew`). A rank
-- that starts it before the last rank arrives spins inside the kernel until then: its wait is
-- last arrival - its start, at most the kernel's length. The late rank's cause is the longest
-- steady host-caused gap of that rank since its previous collective, with the cause
-- `gap_causes` gives it (`tokentrace.causes`); none when the late rank's GPU had no such gap
-- (it was late on the GPU: longer kernels). One row per waiting rank, late rank and cause; this
-- GPU time is busy (inside the kernel), so it is not part of `idle_budget`. A cross-rank query
-- (map per rank in PerfettoSQL, reduce after `-- @reduce` in SQLite: `tokentrace.catalog.reduce`),
-- so it runs on a combined merged trace and on per-rank traces alike. Only ranks that ran at the
-- same time as another are compared (`trace_health`'s overlapping_ranks says which did not).
-- All times in ns.
CREATE PERFETTO FUNCTION tt_query_collective_wait_map(
  -- GLOB pattern of the collective kernels' names.
  name_glob STRING,
  -- Shortest gap of the late rank considered as its cause (>= 0).
  min_gap_ns DURATION,
  -- Longest gap classed `launch_overhead` (>= 0).
  launch_overhead_ns DURATION,
  -- Gaps before the rank's first this-many kernels are `startup` (>= 0; see `gpu_gaps`).
  startup_kernels LONG
)
RETURNS TABLE(
  -- The waiting rank.
  rank STRING,
  -- 1-based index of the collective among the rank's collective kernels (time order).
  collective_index LONG,
  -- Start of the item.
  ts TIMESTAMP,
  -- End of the item.
  end_ts TIMESTAMP,
  -- Why the late rank's host was late (see `gap_causes`); NULL: no host-caused gap of the late rank
  -- since its previous collective.
  cause_kind STRING,
  -- The late rank's cause function.
  cause_function STRING,
  -- Its full VizTracer frame, `func (file:line)`.
  cause_frame STRING
)
AS
-- Map (per rank): every collective kernel, numbered in time order, with the rank's cause had it
-- arrived last: its longest steady host-caused gap since its previous collective (the reduce keeps
-- it for the last rank only). The runner adds the rank's identity, the reduce's sort key
-- (`tokentrace.catalog.identity`).
WITH
  _collectives AS (
    SELECT
      k.rank, k.ts, k.ts + k.dur AS end_ts,
      ROW_NUMBER() OVER (PARTITION BY k.rank ORDER BY k.ts, k.name) AS collective_index
    FROM tt_kernels AS k
    WHERE k.name GLOB $name_glob
  ),
  _windows AS MATERIALIZED (
    SELECT *, LAG(ts) OVER (PARTITION BY rank ORDER BY collective_index) AS prev_ts
    FROM _collectives
  ),
  _gaps AS MATERIALIZED (
    SELECT * FROM tt_gpu_gap_rows($min_gap_ns, $launch_overhead_ns, $startup_kernels)
    WHERE by_host = 1 AND phase = 'steady'
  ),
  -- Each gap's collective: the first one starting at or after the gap's end (one pass over
  -- gaps and collectives in time order, not every gap against every collective), kept when the
  -- gap also starts after the previous collective.
  _marks AS (
    SELECT rank, ts AS at, 0 AS is_gap, collective_index, NULL AS gap_id FROM _windows
    UNION ALL
    SELECT rank, ts + dur AS at, 1 AS is_gap, NULL AS collective_index, id AS gap_id FROM _gaps
  ),
  _next AS MATERIALIZED (
    SELECT gap_id, next_index FROM (
      SELECT
        is_gap, gap_id,
        MIN(collective_index) OVER (
          PARTITION BY rank ORDER BY at DESC, is_gap ROWS UNBOUNDED PRECEDING
        ) AS next_index
      FROM _marks
    )
    WHERE is_gap = 1 AND next_index IS NOT NULL
  ),
  _longest_gaps AS MATERIALIZED (
    SELECT * FROM (
      SELECT
        w.rank, w.collective_index, g.id AS gap_id,
        ROW_NUMBER() OVER (PARTITION BY w.rank, w.collective_index ORDER BY g.dur DESC, g.ts) AS pos
      FROM _next AS n
      JOIN _gaps AS g ON g.id = n.gap_id
      JOIN _windows AS w ON w.rank = g.rank AND w.collective_index = n.next_index
      WHERE g.ts + g.dur <= w.ts AND g.ts >= IFNULL(w.prev_ts, 0)
    )
    WHERE pos = 1
  ),
  -- (a CTE, not a subquery argument: see `_tt_cached_source!`)
  _longest AS (SELECT * FROM _gaps WHERE id IN (SELECT gap_id FROM _longest_gaps)),
  _causes AS MATERIALIZED (SELECT * FROM tt_gap_causes!(_longest))
SELECT
  w.rank, w.collective_index, w.ts, w.end_ts,
  c.cause_kind, c.cause_function, c.cause_frame
FROM _windows AS w
LEFT JOIN _longest_gaps AS lg USING (rank, collective_index)
LEFT JOIN _causes AS c ON c.gap_id = lg.gap_id
ORDER BY w.rank, w.collective_index;
