-- tokentrace.queries.launch_latency: the rows of the bundled query `launch_latency`
-- (`queries/launch_latency.sql`).

INCLUDE PERFETTO MODULE tokentrace.launches;

-- Per rank and kernel name, how long after its launch each kernel started.
--
-- Latency = kernel start - launch_ts, with the launch from `tokentrace.launches`: the CUDA runtime
-- call at the source of the kernel's flow in a torch-profiler trace (`runtime_call`) or the Triton
-- launcher call of a Triton kernel (`triton_launch`), both the true launch-to-start time (`exact`);
-- else the Proton CPU scope at the source of the kernel's flow (`proton_scope`: it opens before the
-- launch, so the latency is an `upper_bound`), else the latest torch call before the kernel
-- (`host_call`, an `estimate`). Kernels replayed from a CUDA graph are left out: a replay call
-- launches hundreds of kernels at once, so its latency says nothing about one of them. One row per
-- rank, kernel name and launch source. Negative latencies mean the kernel started before its launch
-- began: the clocks are misaligned (check `trace_health`). Percentiles are nearest-rank (p50 = the
-- ceil(n/2)-th smallest value). All times in ns.
CREATE PERFETTO FUNCTION tt_query_launch_latency(
  -- Only kernels whose name matches this GLOB pattern.
  name_glob STRING
)
RETURNS TABLE(
  -- Rank tag, e.g. `TP1` (process name for raw traces).
  rank STRING,
  -- Kernel name.
  kernel STRING,
  -- `runtime_call`, `triton_launch`, `proton_scope` or `host_call` (see `gpu_gaps`).
  launch_source STRING,
  -- What the figures are: `exact` (runtime_call, triton_launch), `upper_bound` (proton_scope) or
  -- `estimate` (host_call).
  latency_kind STRING,
  -- Kernels of that name launched from that source.
  count LONG,
  -- Smallest latency.
  min_ns DURATION,
  -- Median latency (nearest rank).
  p50_ns DURATION,
  -- 90th percentile latency (nearest rank).
  p90_ns DURATION,
  -- Largest latency.
  max_ns DURATION,
  -- Mean latency.
  mean_ns DOUBLE,
  -- Kernels that started before their launch began (misalignment).
  negatives LONG
)
AS
WITH
  _selected AS (
    SELECT rank, name, launch_source AS source, ts - launch_ts AS latency
    FROM tt_kernel_launches
    WHERE name GLOB $name_glob
      AND launch_source IN ('runtime_call', 'triton_launch', 'proton_scope', 'host_call')
  ),
  -- Each (rank, name, source) numbered, so that the sort by latency within each carries a
  -- number, not the kernel's name (often hundreds of characters): the engine sorts the rows
  -- themselves, and rows that hold the name cost several times as much to sort.
  _groups AS MATERIALIZED (
    SELECT rank, name, source, ROW_NUMBER() OVER (ORDER BY rank, name, source) AS grp
    FROM _selected
    GROUP BY rank, name, source
  ),
  -- (every kernel has its row there: no join back to `tt_kernels`, which cost a lookup per
  -- kernel)
  _latency AS (
    SELECT g.grp, s.latency
    FROM _selected AS s
    JOIN _groups AS g USING (rank, name, source)
  ),
  _ordered AS (
    SELECT
      grp, latency,
      ROW_NUMBER() OVER (PARTITION BY grp ORDER BY latency) AS position,
      COUNT(*) OVER (PARTITION BY grp) AS n
    FROM _latency
  ),
  _per_group AS (
    SELECT
      grp,
      COUNT(*) AS count,
      MIN(latency) AS min_ns,
      MAX(IIF(position = MAX(1, (50 * n + 99) / 100), latency, NULL)) AS p50_ns,
      MAX(IIF(position = MAX(1, (90 * n + 99) / 100), latency, NULL)) AS p90_ns,
      MAX(latency) AS max_ns,
      AVG(latency) AS mean_ns,
      SUM(latency < 0) AS negatives
    FROM _ordered
    GROUP BY grp
  ),
  _per_kernel AS (
    SELECT g.rank, g.name, g.source, k.*
    FROM _per_group AS k
    JOIN _groups AS g USING (grp)
  )
SELECT
  r.rank,
  k.name AS kernel, k.source AS launch_source,
  CASE k.source
    WHEN 'proton_scope' THEN 'upper_bound' WHEN 'host_call' THEN 'estimate' ELSE 'exact'
  END AS latency_kind,
  k.count, k.min_ns, k.p50_ns, k.p90_ns, k.max_ns, k.mean_ns, k.negatives
FROM _per_kernel AS k
JOIN tt_ranks AS r USING (rank)
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank, k.p50_ns DESC, k.name, k.source;
