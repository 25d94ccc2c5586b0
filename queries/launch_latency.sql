-- launch_latency: per rank and kernel name, how long after its launch each kernel started.
--
-- Latency = kernel start - launch_ts, where launch_ts is the start of the Proton CPU scope at
-- the source of the kernel's `launch->kernel` flow (`tt_kernels.launch_id`). The scope opens
-- before the launch call itself, so latency is an *upper bound* on the true launch-to-start
-- time (it includes the host time spent in the scope before the launch). Only kernels with a
-- flow count (none on triton <= 3.8 traces: no rows). Negative latencies mean the kernel started
-- before its scope opened: the clocks are misaligned (check `trace_health`). Percentiles are
-- nearest-rank (p50 = the ceil(n/2)-th smallest value). All times in ns.
--
-- @param name_glob STRING '*'  Only kernels whose name matches this GLOB pattern.
--
-- @column rank STRING -  Rank tag, e.g. `TP1` (process name for raw traces).
-- @column dp INT -  Data-parallel index (NULL when the tag has none).
-- @column cp INT -  Context-parallel index (NULL when the tag has none).
-- @column tp INT -  Tensor-parallel index (NULL for raw traces).
-- @column stage STRING -  Profiling stage suffix ('' when none).
-- @column kernel STRING -  Kernel name.
-- @column count INT count  Kernels of that name with a launch flow.
-- @column min_ns INT ns  Smallest latency.
-- @column p50_ns INT ns  Median latency (nearest rank).
-- @column p90_ns INT ns  90th percentile latency (nearest rank).
-- @column max_ns INT ns  Largest latency.
-- @column mean_ns FLOAT ns  Mean latency.
-- @column negatives INT count  Kernels that started before their launching scope (misalignment).

INCLUDE PERFETTO MODULE tokentrace.kernels;

WITH
  _latency AS (
    SELECT k.rank, k.name, k.ts - l.ts AS latency
    FROM tt_kernels AS k
    JOIN slice AS l ON l.id = k.launch_id
    WHERE k.name GLOB ${name_glob}
  ),
  _ordered AS (
    SELECT
      rank, name, latency,
      ROW_NUMBER() OVER (PARTITION BY rank, name ORDER BY latency) AS position,
      COUNT(*) OVER (PARTITION BY rank, name) AS n
    FROM _latency
  ),
  _per_kernel AS (
    SELECT
      rank, name,
      COUNT(*) AS count,
      MIN(latency) AS min_ns,
      MAX(IIF(position = MAX(1, (50 * n + 99) / 100), latency, NULL)) AS p50_ns,
      MAX(IIF(position = MAX(1, (90 * n + 99) / 100), latency, NULL)) AS p90_ns,
      MAX(latency) AS max_ns,
      AVG(latency) AS mean_ns,
      SUM(latency < 0) AS negatives
    FROM _ordered
    GROUP BY rank, name
  )
SELECT
  r.rank, r.dp, r.cp, r.tp, r.stage,
  k.name AS kernel, k.count, k.min_ns, k.p50_ns, k.p90_ns, k.max_ns, k.mean_ns, k.negatives
FROM _per_kernel AS k
JOIN tt_ranks AS r USING (rank)
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank, k.p50_ns DESC, k.name;
