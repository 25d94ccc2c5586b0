-- rank_skew: the same scheduler step on different ranks: how far apart did they start and end,
-- and which rank was slowest?
--
-- Steps come from `tokentrace.steps` (slices named `step_name`, numbered per rank in time order);
-- the k-th step of every rank is compared. Durations and ends are the step slices' own (not the
-- windows of `step_breakdown`). A cross-rank query: the map (PerfettoSQL) lists each rank's steps,
-- the reduce (SQLite, after `-- @reduce`) compares them, so it runs on a combined merged trace and
-- on per-rank traces alike (`tokentrace.catalog.reduce`); one per-rank file alone has one rank
-- (skews 0). Steps that only some ranks recorded have n_ranks below the rank count. Only ranks that
-- ran at the same time as another are compared (`trace_health`'s overlapping_ranks says which did
-- not): without any, no row. One row per step index (no rank columns: rows span ranks). All times
-- in ns.
--
-- @param step_name STRING ''  Scope or host frame (function) name that marks a step; '' finds
--   it: `decode_step` where present, else the once-per-step host frame (`tt_auto_steps`).
--
-- @column step_index INT -  1-based step index (per rank, time order).
-- @column n_ranks INT count  Ranks that have this step.
-- @column first_rank STRING -  Rank that started the step first (ties: the lowest tag).
-- @column slowest_rank STRING -  Rank whose step took longest (ties: the lowest tag).
-- @column start_skew_ns INT ns  Latest start - earliest start.
-- @column end_skew_ns INT ns  Latest end - earliest end.
-- @column min_dur_ns INT ns  Shortest step duration among the ranks.
-- @column max_dur_ns INT ns  Longest step duration among the ranks.
-- @column ts INT ns  Earliest start.

INCLUDE PERFETTO MODULE tokentrace.steps;

-- Map (per rank): every step with the rank's sort key.
SELECT
  s.rank, r.dp, r.pp, r.cp, r.tp, r.dcp, r.ep, r.stage, s.step_index, s.ts, s.step_dur,
  s.ts + s.step_dur AS end_ts
FROM tt_steps!(${step_name}) AS s
JOIN tt_ranks AS r USING (rank)
ORDER BY s.rank, s.step_index

-- @reduce
-- Reduce (SQLite, over the map rows of every rank): the k-th steps side by side.
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
