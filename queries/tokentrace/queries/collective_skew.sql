-- tokentrace.queries.collective_skew: the rows of the bundled query `collective_skew`
-- (`queries/collective_skew.sql`), its per-rank map part.

INCLUDE PERFETTO MODULE tokentrace.kernels;

-- Arrival skew at collectives: how much later did the last rank reach the k-th all-reduce (or other
-- collective) kernel than the first?
--
-- This function gives the per-rank rows (the map) of the cross-rank query `collective_skew`: its
-- reduce, after `-- @reduce` in `queries/collective_skew.sql`, compares them across ranks and
-- declares the query's columns.
--
-- Collective kernels are kernels whose name matches `name_glob` (default NCCL's device
-- kernels), numbered per rank in time order; the k-th of every rank is compared. The first rank
-- to arrive waits inside the kernel for the last, so arrival_skew_ns is time the early ranks
-- spent waiting. A cross-rank query (map per rank in PerfettoSQL, reduce after `-- @reduce` in
-- SQLite: `tokentrace.catalog.reduce`), so it runs on a combined merged trace and on per-rank
-- traces alike. Only ranks that ran at the same time as another are compared (`trace_health`'s
-- overlapping_ranks says which did not). One row per collective index (no rank columns: rows
-- span ranks). All times in ns.
CREATE PERFETTO FUNCTION tt_query_collective_skew_map(
  -- GLOB pattern of the collective kernels' names.
  name_glob STRING
)
RETURNS TABLE(
  -- Rank tag, e.g. `TP1` (process name for raw traces).
  rank STRING,
  -- The collective kernel's name.
  name STRING,
  -- Start of the item.
  ts TIMESTAMP,
  -- End of the item.
  end_ts TIMESTAMP,
  -- 1-based index of the collective (per rank, time order).
  collective_index LONG
)
AS
-- Map (per rank): every collective kernel, numbered in time order (the runner adds the rank's
-- identity, the reduce's sort key: `tokentrace.catalog.identity`).
SELECT
  k.rank, k.name, k.ts, k.ts + k.dur AS end_ts,
  ROW_NUMBER() OVER (PARTITION BY k.rank ORDER BY k.ts, k.name) AS collective_index
FROM tt_kernels AS k
WHERE k.name GLOB $name_glob
ORDER BY k.rank, collective_index;
