-- tokentrace.queries.kernel_summary: the rows of the bundled query `kernel_summary`
-- (`queries/kernel_summary.sql`).

INCLUDE PERFETTO MODULE tokentrace.kernels;

-- Per rank and kernel name, how often the kernel ran and how long it took.
--
-- Reads kernel slices (category `kernel`, Proton GPU stream lanes) through `tokentrace.kernels`;
-- ranks come from `tokentrace.ranks` (the merge record, or one rank per process in a raw trace).
-- Each kernel name has a class (`kernel_class`), by the rule of `gpu_busy`: `nccl` (name contains
-- `nccl`, any case), `memory` (slice category `gpu_memcpy` / `gpu_memset`, or a name starting
-- `Memcpy` / `Memset` / `[CUDA memcpy` / `[CUDA memset`), else `compute`. The report shows the
-- names demangled and shortened (`tokentrace.report.kernel_names`). All durations in
-- nanoseconds. Like Nsight Systems' `cuda_gpu_kern_sum`, per rank.
CREATE PERFETTO FUNCTION tt_query_kernel_summary(
  -- Only kernels whose name matches this GLOB pattern (case-sensitive).
  name_glob STRING
)
RETURNS TABLE(
  -- Rank tag, e.g. `TP1` (process name for raw traces).
  rank STRING,
  -- Kernel name (as recorded: mangled C++ names stay mangled).
  kernel STRING,
  -- `compute`, `nccl` or `memory` (see above).
  kernel_class STRING,
  -- How many times the kernel ran on this rank.
  count LONG,
  -- Sum of the kernel's durations.
  total_dur_ns DURATION,
  -- Mean duration.
  mean_dur_ns DOUBLE,
  -- Shortest run.
  min_dur_ns DURATION,
  -- Longest run.
  max_dur_ns DURATION,
  -- Median duration (the lower middle value for an even count).
  p50_dur_ns DURATION,
  -- total_dur_ns / summed duration of all kernels of the rank (0..1; streams summed, not merged).
  gpu_time_share DOUBLE
)
AS
WITH
  _tt_selected AS (
    SELECT
      k.rank, k.name, k.dur, k.kernel_class
    FROM tt_kernels AS k
    WHERE k.name GLOB $name_glob
  ),
  -- Each (rank, name) numbered (`grp`), so that the sort by duration within each carries a
  -- number, not the kernel's name (often hundreds of characters): the engine sorts the rows
  -- themselves, and rows that hold the name cost several times as much to sort.
  _tt_per_kernel AS MATERIALIZED (
    SELECT
      rank, name, MIN(kernel_class) AS kernel_class,
      COUNT(*) AS count,
      SUM(dur) AS total_dur_ns,
      AVG(dur) AS mean_dur_ns,
      MIN(dur) AS min_dur_ns,
      MAX(dur) AS max_dur_ns,
      ROW_NUMBER() OVER (ORDER BY rank, name) AS grp
    FROM _tt_selected
    GROUP BY rank, name
  ),
  -- One window pass (the count per name comes from the aggregation above, not a second one).
  _tt_ordered AS (
    SELECT
      k.grp, s.dur,
      ROW_NUMBER() OVER (PARTITION BY k.grp ORDER BY s.dur) AS position
    FROM _tt_selected AS s
    JOIN _tt_per_kernel AS k USING (rank, name)
  ),
  _tt_median AS (
    SELECT k.rank, k.name, o.dur AS p50_dur_ns
    FROM _tt_ordered AS o
    JOIN _tt_per_kernel AS k USING (grp)
    WHERE o.position = (k.count + 1) / 2
  ),
  _tt_rank_total AS (
    SELECT rank, SUM(dur) AS rank_dur FROM tt_kernels GROUP BY rank
  )
SELECT
  r.rank,
  k.name AS kernel, k.kernel_class,
  k.count, k.total_dur_ns, k.mean_dur_ns, k.min_dur_ns, k.max_dur_ns,
  m.p50_dur_ns,
  CAST(k.total_dur_ns AS DOUBLE) / t.rank_dur AS gpu_time_share
FROM _tt_per_kernel AS k
JOIN tt_ranks AS r USING (rank)
JOIN _tt_median AS m USING (rank, name)
JOIN _tt_rank_total AS t USING (rank)
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank, k.total_dur_ns DESC, k.name;
