-- rank_skew: the same scheduler step on different ranks: how far apart did they start and end, and
-- which rank was slowest?
--
-- Its parameters, columns and method: `tt_query_rank_skew_map` in the module
-- `tokentrace.queries.rank_skew`.

INCLUDE PERFETTO MODULE tokentrace.queries.rank_skew;

SELECT * FROM tt_query_rank_skew_map(
  ''  -- step_name
)

-- @reduce
-- Reduce (SQLite, over the map rows of every rank): the k-th steps side by side.
-- Its result's columns: the SELECT after this must return them, in this order (the runner
-- checks it).
CREATE TEMP TABLE rank_skew_result(
  -- 1-based step index (per rank, time order).
  step_index LONG,
  -- Ranks that have this step.
  n_ranks LONG,
  -- Rank that started the step first (ties: the lowest tag).
  first_rank STRING,
  -- Rank whose step took longest (ties: the lowest tag).
  slowest_rank STRING,
  -- Latest start - earliest start.
  start_skew_ns DURATION,
  -- Latest end - earliest end.
  end_skew_ns DURATION,
  -- Shortest step duration among the ranks.
  min_dur_ns DURATION,
  -- Longest step duration among the ranks.
  max_dur_ns DURATION,
  -- Earliest start.
  ts TIMESTAMP
);

WITH
  -- Ranks compared: those that ran at the same time as another (`map_ranks_together`, made by
  -- the reduce runner): the k-th items of runs recorded seconds apart are not the same work.
  _compared AS (
    SELECT * FROM map WHERE rank IN (SELECT rank FROM map_ranks_together)
  ),
  _steps AS (
    SELECT
      *,
      ROW_NUMBER() OVER (
        PARTITION BY step_index ORDER BY ts, dp, pp, cp, tp, dcp, ep, stage, rank
      ) AS start_pos,
      ROW_NUMBER() OVER (
        PARTITION BY step_index ORDER BY step_dur DESC, dp, pp, cp, tp, dcp, ep, stage, rank
      ) AS dur_pos
    FROM _compared
  )
SELECT
  step_index,
  COUNT(*) AS n_ranks,
  MAX(IIF(start_pos = 1, rank, NULL)) AS first_rank,
  MAX(IIF(dur_pos = 1, rank, NULL)) AS slowest_rank,
  MAX(ts) - MIN(ts) AS start_skew_ns,
  MAX(end_ts) - MIN(end_ts) AS end_skew_ns,
  MIN(step_dur) AS min_dur_ns,
  MAX(step_dur) AS max_dur_ns,
  MIN(ts) AS ts
FROM _steps
GROUP BY step_index
ORDER BY step_index;
