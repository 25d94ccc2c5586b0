-- collective_skew: arrival skew at collectives: how much later did the last rank reach the k-th
-- all-reduce (or other collective) kernel than the first?
--
-- Collective kernels are kernels whose name matches `name_glob` (default NCCL's device
-- kernels), numbered per rank in time order; the k-th of every rank is compared. The first rank
-- to arrive waits inside the kernel for the last, so arrival_skew_ns is time the early ranks
-- spent waiting. A cross-rank query (map per rank in PerfettoSQL, reduce after `-- @reduce` in
-- SQLite: `tokentrace.catalog.reduce`), so it runs on a combined merged trace and on per-rank
-- traces alike. Only ranks that ran at the same time as another are compared (`trace_health`'s
-- overlapping_ranks says which did not). One row per collective index (no rank columns: rows
-- span ranks). All times in ns.
--
-- @param name_glob STRING '*ncclDevKernel*'  GLOB pattern of the collective kernels' names.
--
-- @column collective_index INT -  1-based index of the collective (per rank, time order).
-- @column kernel STRING -  Kernel name (the lowest name if the ranks disagree).
-- @column n_ranks INT count  Ranks that ran this collective.
-- @column arrival_skew_ns INT ns  Latest start - earliest start.
-- @column last_arrival_rank STRING -  Rank that started it last (ties: the highest tag).
-- @column end_skew_ns INT ns  Latest end - earliest end.
-- @column ts INT ns  Earliest start.

INCLUDE PERFETTO MODULE tokentrace.kernels;

-- Map (per rank): every collective kernel, numbered in time order, with the rank's sort key.
SELECT
  k.rank, r.dp, r.pp, r.cp, r.tp, r.dcp, r.ep, r.stage, k.name, k.ts, k.ts + k.dur AS end_ts,
  ROW_NUMBER() OVER (PARTITION BY k.rank ORDER BY k.ts, k.name) AS collective_index
FROM tt_kernels AS k
JOIN tt_ranks AS r USING (rank)
WHERE k.name GLOB ${name_glob}
ORDER BY k.rank, collective_index

-- @reduce
-- Reduce (SQLite, over the map rows of every rank): the k-th collectives side by side.
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
