-- tokentrace.queries.rank_skew: the rows of the bundled query `rank_skew`
-- (`queries/rank_skew.sql`), its per-rank map part.

INCLUDE PERFETTO MODULE tokentrace.steps;

-- The same scheduler step on different ranks: how far apart did they start and end, and which rank
-- was slowest?
--
-- This function gives the per-rank rows (the map) of the cross-rank query `rank_skew`: its reduce,
-- after `-- @reduce` in `queries/rank_skew.sql`, compares them across ranks and declares the
-- query's columns.
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
CREATE PERFETTO FUNCTION tt_query_rank_skew_map(
  -- Scope or host frame (function) name that marks a step; '' finds it: `decode_step` where
  -- present, else the once-per-step host frame (`tt_auto_steps`).
  step_name STRING
)
RETURNS TABLE(
  -- Rank tag, e.g. `TP1` (process name for raw traces).
  rank STRING,
  -- 1-based step index (per rank, time order).
  step_index LONG,
  -- Start of the item.
  ts TIMESTAMP,
  -- The step slice's duration.
  step_dur DURATION,
  -- End of the item.
  end_ts TIMESTAMP
)
AS
-- Map (per rank): every step (the runner adds the rank's identity, the reduce's sort key:
-- `tokentrace.catalog.identity`).
SELECT
  s.rank, s.step_index, s.ts, s.step_dur,
  s.ts + s.step_dur AS end_ts
FROM tt_steps!($step_name) AS s
ORDER BY s.rank, s.step_index;
