-- tokentrace.kernels: every GPU kernel with its rank and, where Proton recorded one, its launch.
--
-- Kernels are thread slices of category `kernel` (Proton's and the torch profiler's GPU stream
-- lanes), and the torch profiler's `gpu_memcpy` / `gpu_memset` (the GPU is busy with them too).
-- The launch is the source of the kernel's flow: Proton's CPU scope open at launch time (its
-- start is the earliest time the launch can have happened), or the torch profiler's CUDA
-- runtime call (`ac2g`, exact). Times in ns.

INCLUDE PERFETTO MODULE tokentrace.ranks;

-- One row per kernel slice.
CREATE PERFETTO TABLE tt_kernels(
  -- The kernel slice.
  id JOINID(slice.id),
  -- Start, ns.
  ts TIMESTAMP,
  -- Duration, ns.
  dur DURATION,
  -- Kernel name.
  name STRING,
  -- `kernel`, or the torch profiler's `gpu_memcpy` / `gpu_memset`.
  category STRING,
  -- What the GPU does in it: `nccl` (name contains `nccl`, any case), else `memory` (category
  -- `gpu_memcpy` / `gpu_memset`, or a name starting `Memcpy` / `Memset` as the torch profiler
  -- writes them, or `[CUDA memcpy` / `[CUDA memset` as Nsight does), else `compute`. The one
  -- rule behind `gpu_busy` and `kernel_summary.kernel_class`.
  kernel_class STRING,
  -- Rank tag (see `tt_ranks.rank`).
  rank STRING,
  -- The GPU stream lane (thread) the kernel ran on.
  utid JOINID(thread.id),
  -- The process of that lane.
  upid JOINID(process.id),
  -- The launching CPU scope (source of the flow into the kernel), NULL without flow.
  launch_id JOINID(slice.id)
) AS
SELECT
  s.id, s.ts, s.dur, s.name, s.category,
  CASE
    WHEN LOWER(s.name) GLOB '*nccl*' THEN 'nccl'
    WHEN s.category IN ('gpu_memcpy', 'gpu_memset')
      OR s.name GLOB 'Memcpy*' OR s.name GLOB 'Memset*'
      OR s.name GLOB '[[]CUDA memcpy*' OR s.name GLOB '[[]CUDA memset*' THEN 'memory'
    ELSE 'compute'
  END AS kernel_class,
  rp.rank, t.utid, t.upid,
  fl.launch_id
FROM slice AS s
JOIN thread_track AS tt ON s.track_id = tt.id
JOIN thread AS t USING (utid)
JOIN tt_rank_processes AS rp ON rp.upid = t.upid
-- The flows aggregated once per destination and joined, not a correlated subquery per kernel
-- (a third of this table's cost on 80k kernels).
LEFT JOIN (
  SELECT slice_in, MIN(slice_out) AS launch_id FROM flow GROUP BY slice_in
) AS fl ON fl.slice_in = s.id
WHERE s.category IN ('kernel', 'gpu_memcpy', 'gpu_memset')
ORDER BY rp.rank, s.ts, s.id;
