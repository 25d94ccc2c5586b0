-- collective_wait: how long did each rank wait inside collectives for a late rank, and why was that
-- rank late?
--
-- Its parameters, columns and method: `tt_query_collective_wait_map` in the module
-- `tokentrace.queries.collective_wait`.

INCLUDE PERFETTO MODULE tokentrace.queries.collective_wait;

SELECT * FROM tt_query_collective_wait_map(
  '*ncclDevKernel*',  -- name_glob
  tt_default_min_gap_ns(),  -- min_gap_ns
  10000,  -- launch_overhead_ns
  10  -- startup_kernels
)

-- @reduce
-- Reduce (SQLite, over the map rows of every rank): the last rank of each collective, and how
-- long every other rank waited for it.
-- Its result's columns: the SELECT after this must return them, in this order (the runner
-- checks it).
CREATE TEMP TABLE collective_wait_result(
  -- The waiting rank.
  rank STRING,
  -- The rank that arrived last.
  late_rank STRING,
  -- Why the late rank's host was late (see `gap_causes`); NULL: no host-caused gap of the late
  -- rank since its previous collective.
  cause_kind STRING,
  -- The late rank's cause function.
  cause_function STRING,
  -- Its full VizTracer frame, `func (file:line)`.
  cause_frame STRING,
  -- Collectives in which the rank waited for that rank and cause.
  collectives LONG,
  -- The rank's time inside those collectives before the late rank arrived.
  wait_ns DURATION
);

WITH
  -- Ranks compared: those that ran at the same time as another (`map_ranks_together`, made by
  -- the reduce runner): the k-th items of runs recorded seconds apart are not the same work.
  _compared AS (
    SELECT * FROM map WHERE rank IN (SELECT rank FROM map_ranks_together)
  ),
  _late AS (
    SELECT * FROM (
      SELECT
        *,
        COUNT(*) OVER (PARTITION BY collective_index) AS n_ranks,
        ROW_NUMBER() OVER (
          PARTITION BY collective_index
          ORDER BY ts DESC, dp DESC, pp DESC, cp DESC, tp DESC, dcp DESC, ep DESC, stage DESC,
            rank DESC
        ) AS arrival_pos
      FROM _compared
    )
    WHERE arrival_pos = 1 AND n_ranks > 1
  ),
  _waits AS (
    SELECT
      c.rank, c.dp, c.pp, c.cp, c.tp, c.dcp, c.ep, c.stage, l.rank AS late_rank,
      l.cause_kind, l.cause_function, l.cause_frame,
      MIN(MAX(l.ts - c.ts, 0), c.end_ts - c.ts) AS wait_ns
    FROM _compared AS c
    JOIN _late AS l USING (collective_index)
    WHERE c.rank != l.rank
  )
SELECT
  rank, late_rank, cause_kind, cause_function, cause_frame,
  COUNT(*) AS collectives, SUM(wait_ns) AS wait_ns
FROM _waits
GROUP BY rank, late_rank, cause_kind, cause_function, cause_frame
ORDER BY dp, pp, cp, tp, dcp, ep, stage, rank, wait_ns DESC, late_rank, cause_function;
