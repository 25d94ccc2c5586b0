-- gpu_busy: per rank, how the GPU's busy time inside its active window splits into compute,
-- communication (NCCL) and memory copies / sets.
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
--
-- @param rank STRING ''  Only this rank tag (e.g. 'TP1'); '' = all ranks.
--
-- @column rank STRING -  Rank tag, e.g. `TP1` (process name for raw traces).
-- @column dp INT -  Data-parallel index (NULL when the tag has none).
-- @column cp INT -  Context-parallel index (NULL when the tag has none).
-- @column tp INT -  Tensor-parallel index (NULL for raw traces).
-- @column stage STRING -  Profiling stage suffix ('' when none).
-- @column active_ns INT ns  First kernel start to last kernel end (as `gpu_windows`).
-- @column busy_ns INT ns  Time with at least one kernel running (as `gpu_windows`).
-- @column idle_ns INT ns  active_ns - busy_ns.
-- @column compute_ns INT ns  Time with at least one compute kernel running.
-- @column memory_ns INT ns  Time with a memory copy or set running and no compute kernel.
-- @column nccl_ns INT ns  Time with an NCCL kernel running and no other kernel (exposed
--   communication).
-- @column compute_share FLOAT fraction  compute_ns / active_ns (0 when active_ns = 0).
-- @column memory_share FLOAT fraction  memory_ns / active_ns (0 when active_ns = 0).
-- @column nccl_share FLOAT fraction  nccl_ns / active_ns (0 when active_ns = 0).
-- @column idle_share FLOAT fraction  idle_ns / active_ns (0 when active_ns = 0); the four
--   shares add up to 1.
-- @column memory_total_ns INT ns  Time with a memory op running, beside other kernels or not.
-- @column memory_overlap_ns INT ns  memory_total_ns - memory_ns: memory ops under compute.
-- @column nccl_total_ns INT ns  Time with an NCCL kernel running, beside other kernels or not.
-- @column nccl_overlap_ns INT ns  nccl_total_ns - nccl_ns: communication hidden behind compute
--   or memory ops.
-- @column compute_kernels INT count  Compute kernels of the rank.
-- @column memory_ops INT count  Memory copies and sets.
-- @column nccl_kernels INT count  NCCL kernels.

INCLUDE PERFETTO MODULE tokentrace.kernels;

WITH
  _kinds AS (
    SELECT
      id, rank, ts, ts + dur AS end_ts, kernel_class
    -- the kernels `tt_gpu_busy` unites (`tokentrace.gaps`: every kernel of `tt_kernels` has its
    -- `tt_kernel_launches` row, and those with dur >= 0 count), with their `kernel_class`
    FROM tt_kernels
    WHERE dur >= 0 AND (${rank} = '' OR rank = ${rank})
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
  r.rank, r.dp, r.cp, r.tp, r.stage,
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
