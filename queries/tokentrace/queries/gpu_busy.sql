-- tokentrace.queries.gpu_busy: the rows of the bundled query `gpu_busy` (`queries/gpu_busy.sql`).

INCLUDE PERFETTO MODULE tokentrace.kernels;

-- Per rank, how the GPU's busy time inside its active window splits into compute, communication
-- (NCCL) and memory copies / sets.
--
-- The active window and busy time are those of `gpu_windows` (`tokentrace.gaps`): from the rank's
-- first kernel start to its last kernel end; busy = the union of all its kernels. Every kernel has
-- one class (`tt_kernels.kernel_class`, also in `kernel_summary`): `nccl` when its name contains
-- `nccl` (any case: `ncclDevKernel_AllReduce_Sum_bf16_RING_LL`, mangled `_Z40ncclDevKernel...`),
-- else `memory` for a copy or set (slice category `gpu_memcpy` / `gpu_memset`, or a name starting
-- `Memcpy` / `Memset` as the torch profiler writes them, or `[CUDA memcpy` / `[CUDA memset` as
-- Nsight does), else `compute`. A class's time is the union of its kernels' intervals: kernels of
-- one class overlapping on several streams count once. Overlap between classes is counted once, for
-- the first class running of compute, memory, nccl: compute_ns = time with a compute kernel
-- running; memory_ns = a memory op running and no compute kernel; nccl_ns = an NCCL kernel running
-- and nothing else (exposed communication: an all-reduce beside a compute kernel on another stream
-- is compute time, and in nccl_overlap_ns). So compute_ns + memory_ns + nccl_ns = busy_ns, plus
-- idle_ns = active_ns, and the four shares add up to 1. All times in ns.
CREATE PERFETTO FUNCTION tt_query_gpu_busy(
  -- Only this rank tag (e.g. 'TP1'); '' = all ranks.
  rank STRING
)
RETURNS TABLE(
  -- Rank tag, e.g. `TP1` (process name for raw traces).
  rank STRING,
  -- First kernel start to last kernel end (as `gpu_windows`).
  active_ns DURATION,
  -- Time with at least one kernel running (as `gpu_windows`).
  busy_ns DURATION,
  -- active_ns - busy_ns.
  idle_ns DURATION,
  -- Time with at least one compute kernel running.
  compute_ns DURATION,
  -- Time with a memory copy or set running and no compute kernel.
  memory_ns DURATION,
  -- Time with an NCCL kernel running and no other kernel (exposed communication).
  nccl_ns DURATION,
  -- compute_ns / active_ns (0 when active_ns = 0).
  compute_share DOUBLE,
  -- memory_ns / active_ns (0 when active_ns = 0).
  memory_share DOUBLE,
  -- nccl_ns / active_ns (0 when active_ns = 0).
  nccl_share DOUBLE,
  -- idle_ns / active_ns (0 when active_ns = 0); the four shares add up to 1.
  idle_share DOUBLE,
  -- Time with a memory op running, beside other kernels or not.
  memory_total_ns DURATION,
  -- memory_total_ns - memory_ns: memory ops under compute.
  memory_overlap_ns DURATION,
  -- Time with an NCCL kernel running, beside other kernels or not.
  nccl_total_ns DURATION,
  -- nccl_total_ns - nccl_ns: communication hidden behind compute or memory ops.
  nccl_overlap_ns DURATION,
  -- Compute kernels of the rank.
  compute_kernels LONG,
  -- Memory copies and sets.
  memory_ops LONG,
  -- NCCL kernels.
  nccl_kernels LONG
)
AS
WITH
  _kinds AS (
    SELECT
      id, rank, ts, ts + dur AS end_ts, kernel_class
    -- the kernels `tt_gpu_busy` unites (`tokentrace.gaps`: every kernel of `tt_kernels` has its
    -- `tt_kernel_launches` row, and those with dur >= 0 count), with their `kernel_class`
    FROM tt_kernels
    WHERE dur >= 0 AND ($rank = '' OR rank = $rank)
  ),
  -- One pass in start order: the length of a union of intervals is the sum over its intervals,
  -- by start, of the part that ends after every earlier one (end - max(start, latest earlier
  -- end), at least 0). Running latest ends for the unions of compute kernels, of compute and
  -- memory, of memory, of NCCL and of all kernels (NULL: no earlier one).
  _running AS (
    SELECT
      rank, kernel_class, ts, end_ts,
      MAX(IIF(kernel_class = 'compute', end_ts, NULL)) OVER w AS prev_c,
      MAX(IIF(kernel_class != 'nccl', end_ts, NULL)) OVER w AS prev_cm,
      MAX(IIF(kernel_class = 'memory', end_ts, NULL)) OVER w AS prev_m,
      MAX(IIF(kernel_class = 'nccl', end_ts, NULL)) OVER w AS prev_n,
      MAX(end_ts) OVER w AS prev_all
    FROM _kinds
    WINDOW w AS (PARTITION BY rank ORDER BY ts, end_ts, id
                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
  ),
  _unions AS (
    SELECT
      rank, MAX(end_ts) - MIN(ts) AS active_ns,
      SUM(MAX(0, end_ts - MAX(ts, IFNULL(prev_all, ts)))) AS busy_ns,
      SUM(IIF(kernel_class = 'compute',
              MAX(0, end_ts - MAX(ts, IFNULL(prev_c, ts))), 0)) AS compute_ns,
      SUM(IIF(kernel_class != 'nccl',
              MAX(0, end_ts - MAX(ts, IFNULL(prev_cm, ts))), 0)) AS compute_memory_ns,
      SUM(IIF(kernel_class = 'memory',
              MAX(0, end_ts - MAX(ts, IFNULL(prev_m, ts))), 0)) AS memory_total_ns,
      SUM(IIF(kernel_class = 'nccl',
              MAX(0, end_ts - MAX(ts, IFNULL(prev_n, ts))), 0)) AS nccl_total_ns,
      SUM(kernel_class = 'compute') AS compute_kernels, SUM(kernel_class = 'memory') AS memory_ops,
      SUM(kernel_class = 'nccl') AS nccl_kernels
    FROM _running
    GROUP BY rank
  ),
  _split AS (
    SELECT
      rank, active_ns, busy_ns, active_ns - busy_ns AS idle_ns,
      compute_ns,
      compute_memory_ns - compute_ns AS memory_ns,
      busy_ns - compute_memory_ns AS nccl_ns,
      memory_total_ns, nccl_total_ns,
      compute_kernels, memory_ops, nccl_kernels
    FROM _unions
  )
SELECT
  r.rank,
  s.active_ns, s.busy_ns, s.idle_ns, s.compute_ns, s.memory_ns, s.nccl_ns,
  IIF(s.active_ns > 0, CAST(s.compute_ns AS DOUBLE) / s.active_ns, 0.0) AS compute_share,
  IIF(s.active_ns > 0, CAST(s.memory_ns AS DOUBLE) / s.active_ns, 0.0) AS memory_share,
  IIF(s.active_ns > 0, CAST(s.nccl_ns AS DOUBLE) / s.active_ns, 0.0) AS nccl_share,
  IIF(s.active_ns > 0, CAST(s.idle_ns AS DOUBLE) / s.active_ns, 0.0) AS idle_share,
  s.memory_total_ns, s.memory_total_ns - s.memory_ns AS memory_overlap_ns,
  s.nccl_total_ns, s.nccl_total_ns - s.nccl_ns AS nccl_overlap_ns,
  s.compute_kernels, s.memory_ops, s.nccl_kernels
FROM _split AS s
JOIN tt_ranks AS r USING (rank)
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank;
