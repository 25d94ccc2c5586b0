-- tokentrace.gaps: when each rank's GPU was busy, when it sat idle, and why it restarted late.
--
-- GPU busy = the union of the rank's kernel intervals (all streams and overlap lanes of its GPU
-- process merged; kernels that overlap, as with Hopper's programmatic dependent launch, count
-- once). A gap is a maximal idle interval inside the rank's active window (first kernel start to
-- last kernel end), so idle time before the first or after the last kernel is never a gap. Gaps
-- always have dur > 0: back-to-back kernels (next start == previous end) leave none.
--
-- The launch of the kernel that ends a gap is the source slice of its `launch->kernel` flow
-- (`tt_kernels.launch_id`): the Proton CPU scope open at launch time. Its start is the *earliest*
-- time the launch can have happened, so a gap classed `host_late` (the scope began after the GPU
-- went idle) is a conservative call: the true launch came at least that late. Times in ns.
--
-- Gap classes (see `tt_gpu_gaps`): `no_link` (next kernel has no flow: triton <= 3.8 Proton or
-- an unmatched kernel), `host_late` (launch_ts >= gap start), `launch_overhead` (launch before
-- the gap and dur <= launch_overhead_ns), `gpu_queued` (launch before the gap, longer gap).
--
-- Phase: a gap before which the rank's GPU had run fewer than `startup_kernels` kernels is
-- `startup`, every later gap `steady`. The first launches after the profiler starts pay one-off
-- costs: CUPTI initialisation, lazy CUDA context / module / NCCL initialisation, JIT compilation
-- of each kernel's first launch. On the real traces that is one 30-75 ms gap after the first
-- kernel and a few sub-ms gaps between the next 2-4 kernels, then never again; those gaps are not
-- the steady state a serving engineer tunes, so the stall profile leaves them out by default.
--
-- Host-caused (`by_host`): `host_late`, or `no_link` on a rank none of whose kernels has a launch
-- flow (triton <= 3.8 Proton: nothing can prove the GPU waited on anything but the host).

INCLUDE PERFETTO MODULE tokentrace.kernels;

-- Kernels with the start and name of their launching scope, and the running end of the rank's
-- busy time before each kernel (to find where a new busy interval starts).
CREATE PERFETTO TABLE _tt_gap_kernels AS
WITH
  _launched AS (
    SELECT
      k.id, k.rank, k.ts, k.dur, k.ts + k.dur AS end_ts, k.name,
      l.ts AS launch_ts, l.name AS launch_scope
    FROM tt_kernels AS k
    LEFT JOIN slice AS l ON l.id = k.launch_id
    WHERE k.dur >= 0
  )
SELECT
  *,
  MAX(end_ts) OVER (
    PARTITION BY rank ORDER BY ts, end_ts, id
    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
  ) AS prev_max_end
FROM _launched;

-- Kernels numbered by the busy interval (island) of their rank that they belong to.
CREATE PERFETTO TABLE _tt_kernel_islands AS
SELECT
  *,
  SUM(IIF(prev_max_end IS NULL OR ts > prev_max_end, 1, 0)) OVER (
    PARTITION BY rank ORDER BY ts, end_ts, id
    ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
  ) AS island
FROM _tt_gap_kernels;

-- GPU busy time: one row per maximal interval in which at least one kernel of the rank runs.
-- Non-overlapping per rank (usable with `intervals.intersect`).
CREATE PERFETTO TABLE tt_gpu_busy(
  -- Row id (for `_interval_intersect!`; not stable across traces).
  id LONG,
  -- Rank tag (see `tt_ranks.rank`).
  rank STRING,
  -- 1-based index of the busy interval on its rank, in time order.
  busy_index LONG,
  -- Start, ns.
  ts TIMESTAMP,
  -- Duration, ns.
  dur DURATION,
  -- Kernels in the interval.
  kernels LONG
) AS
SELECT
  ROW_NUMBER() OVER (ORDER BY rank, island) AS id,
  rank,
  island AS busy_index,
  MIN(ts) AS ts,
  MAX(end_ts) - MIN(ts) AS dur,
  COUNT(*) AS kernels
FROM _tt_kernel_islands
GROUP BY rank, island
ORDER BY rank, island;

-- First kernel of each busy interval (earliest start; ties: earliest launch, then name) and
-- last kernel (latest end; ties: latest start, then name).
CREATE PERFETTO TABLE _tt_island_edges AS
WITH
  _ranked AS (
    SELECT
      rank, island, ts, end_ts, name, launch_ts, launch_scope,
      ROW_NUMBER() OVER (
        PARTITION BY rank, island
        ORDER BY ts, launch_ts IS NULL, launch_ts, name, id
      ) AS first_pos,
      ROW_NUMBER() OVER (
        PARTITION BY rank, island
        ORDER BY end_ts DESC, ts DESC, name, id
      ) AS last_pos
    FROM _tt_kernel_islands
  )
SELECT
  f.rank, f.island,
  f.ts AS first_ts, f.name AS first_kernel, f.launch_ts AS first_launch_ts,
  f.launch_scope AS first_launch_scope,
  l.end_ts AS last_end, l.name AS last_kernel
FROM _ranked AS f
JOIN _ranked AS l ON l.rank = f.rank AND l.island = f.island AND l.last_pos = 1
WHERE f.first_pos = 1;

-- Every GPU idle interval of every rank (no minimum length): from the end of one busy interval
-- to the start of the next. Non-overlapping per rank.
CREATE PERFETTO TABLE tt_gpu_idle(
  -- Row id (for `_interval_intersect!`; not stable across traces).
  id LONG,
  -- Rank tag.
  rank STRING,
  -- Gap start (the end of the busy interval before it), ns.
  ts TIMESTAMP,
  -- Gap length, ns (> 0).
  dur DURATION,
  -- Kernel whose end starts the gap (latest end before it).
  prev_kernel STRING,
  -- Kernel whose start ends the gap.
  next_kernel STRING,
  -- Its start, ns (= ts + dur).
  next_kernel_ts TIMESTAMP,
  -- Start of its launching Proton scope, ns (NULL without launch flow).
  launch_ts TIMESTAMP,
  -- Name of that scope (NULL without launch flow).
  launch_scope STRING,
  -- Kernels the rank's GPU had run before the gap (all kernels of the busy intervals before it).
  kernels_before LONG
) AS
WITH
  _paired AS (
    SELECT
      e.rank,
      SUM(b.kernels) OVER w AS kernels_before,
      e.last_end AS ts,
      e.last_kernel AS prev_kernel,
      LEAD(e.first_ts) OVER w AS next_kernel_ts,
      LEAD(e.first_kernel) OVER w AS next_kernel,
      LEAD(e.first_launch_ts) OVER w AS launch_ts,
      LEAD(e.first_launch_scope) OVER w AS launch_scope
    FROM _tt_island_edges AS e
    JOIN tt_gpu_busy AS b ON b.rank = e.rank AND b.busy_index = e.island
    WINDOW w AS (PARTITION BY e.rank ORDER BY e.island)
  )
SELECT
  ROW_NUMBER() OVER (ORDER BY rank, ts) AS id,
  rank, ts, next_kernel_ts - ts AS dur,
  prev_kernel, next_kernel, next_kernel_ts, launch_ts, launch_scope, kernels_before
FROM _paired
WHERE next_kernel_ts IS NOT NULL
ORDER BY rank, ts;

-- The class of a gap from its start, length and the start of the next kernel's launch.
CREATE PERFETTO FUNCTION tt_gap_class(
  -- Gap start, ns.
  ts LONG,
  -- Gap length, ns.
  dur LONG,
  -- Start of the launching scope of the next kernel, ns (NULL: no flow).
  launch_ts LONG,
  -- Longest gap still called `launch_overhead` when the launch came before the gap, ns.
  launch_overhead_ns LONG
)
-- `no_link`, `host_late`, `launch_overhead` or `gpu_queued`.
RETURNS STRING AS
SELECT CASE
  WHEN $launch_ts IS NULL THEN 'no_link'
  WHEN $launch_ts >= $ts THEN 'host_late'
  WHEN $dur <= $launch_overhead_ns THEN 'launch_overhead'
  ELSE 'gpu_queued'
END;

-- Whether any kernel of each rank carries a launch flow (0: triton <= 3.8 Proton).
CREATE PERFETTO TABLE _tt_rank_flows AS
SELECT rank, MAX(launch_id IS NOT NULL) AS has_flows
FROM tt_kernels
GROUP BY rank
ORDER BY rank;

-- The GPU gaps of at least `min_gap_ns`, classified, numbered per rank in time order.
-- Columns: `id` (of `tt_gpu_idle`), `rank`, `gap_index` (1-based), `ts`, `dur`, `end_ts`,
-- `prev_kernel`, `next_kernel`, `next_kernel_ts`, `launch_ts`, `launch_scope`, `gap_class`,
-- `host_caused_ns` (host_late: launch_ts - ts clamped to [0, dur]; launch_overhead and
-- gpu_queued: 0; no_link: NULL), `kernels_before`, `phase` (`startup` when kernels_before <
-- startup_kernels, else `steady`), `by_host` (1: host_late, or no_link on a rank without
-- launch flows).
CREATE PERFETTO MACRO tt_gpu_gaps(
  -- Minimum gap length, ns (an expression).
  min_gap_ns Expr,
  -- Longest `launch_overhead` gap, ns (an expression).
  launch_overhead_ns Expr,
  -- Gaps before the rank's first `startup_kernels` kernels ran are `startup` (an expression).
  startup_kernels Expr
)
RETURNS TableOrSubquery AS
(
  SELECT
    g.id, g.rank,
    ROW_NUMBER() OVER (PARTITION BY g.rank ORDER BY g.ts) AS gap_index,
    g.ts, g.dur, g.ts + g.dur AS end_ts,
    g.prev_kernel, g.next_kernel, g.next_kernel_ts, g.launch_ts, g.launch_scope,
    tt_gap_class(g.ts, g.dur, g.launch_ts, $launch_overhead_ns) AS gap_class,
    CASE tt_gap_class(g.ts, g.dur, g.launch_ts, $launch_overhead_ns)
      WHEN 'no_link' THEN NULL
      WHEN 'host_late' THEN MIN(g.dur, MAX(0, g.launch_ts - g.ts))
      ELSE 0
    END AS host_caused_ns,
    g.kernels_before,
    IIF(g.kernels_before < $startup_kernels, 'startup', 'steady') AS phase,
    CASE tt_gap_class(g.ts, g.dur, g.launch_ts, $launch_overhead_ns)
      WHEN 'host_late' THEN 1
      WHEN 'no_link' THEN 1 - f.has_flows
      ELSE 0
    END AS by_host
  FROM tt_gpu_idle AS g
  JOIN _tt_rank_flows AS f USING (rank)
  WHERE g.dur >= $min_gap_ns
);
