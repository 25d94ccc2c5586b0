-- collective_skew: arrival skew at collectives: how much later did the last rank reach the k-th
-- all-reduce (or other collective) kernel than the first?
--
-- Its parameters, columns and method: `tt_query_collective_skew_map` in the module
-- `tokentrace.queries.collective_skew`.

INCLUDE PERFETTO MODULE tokentrace.queries.collective_skew;

SELECT * FROM tt_query_collective_skew_map(
  '*ncclDevKernel*'  -- name_glob
)

-- @reduce
-- Reduce (SQLite, over the map rows of every rank): the k-th collectives side by side.
-- Its result's columns: the SELECT after this must return them, in this order (the runner
-- checks it).
CREATE TEMP TABLE collective_skew_result(
  -- 1-based index of the collective (per rank, time order).
  collective_index LONG,
  -- Kernel name (the lowest name if the ranks disagree).
  kernel STRING,
  -- Ranks that ran this collective.
  n_ranks LONG,
  -- Latest start - earliest start.
  arrival_skew_ns DURATION,
  -- Rank that started it last (ties: the highest tag).
  last_arrival_rank STRING,
  -- Latest end - earliest end.
  end_skew_ns DURATION,
  -- Earliest start.
  ts TIMESTAMP
);

WITH
  -- Ranks compared: those that ran at the same time as another (`map_ranks_together`, made by
  -- the reduce runner): the k-th items of runs recorded seconds apart are not the same work.
  _compared AS (
    SELECT * FROM map WHERE rank IN (SELECT rank FROM map_ranks_together)
  ),
  _ranked AS (
    SELECT
      *,
      ROW_NUMBER() OVER (
        PARTITION BY collective_index
        ORDER BY ts DESC, dp DESC, pp DESC, cp DESC, tp DESC, dcp DESC, ep DESC, stage DESC,
          rank DESC
      ) AS arrival_pos
    FROM _compared
  )
SELECT
  collective_index,
  MIN(name) AS kernel,
  COUNT(*) AS n_ranks,
  MAX(ts) - MIN(ts) AS arrival_skew_ns,
  MAX(IIF(arrival_pos = 1, rank, NULL)) AS last_arrival_rank,
  MAX(end_ts) - MIN(end_ts) AS end_skew_ns,
  MIN(ts) AS ts
FROM _ranked
GROUP BY collective_index
ORDER BY collective_index;
