-- tokentrace.queries.gpu_gaps: the rows of the bundled query `gpu_gaps` (`queries/gpu_gaps.sql`).

INCLUDE PERFETTO MODULE tokentrace.gaps;

-- When did each rank's GPU sit idle, and was the host late to launch the next kernel?
--
-- Reads kernel slices (category `kernel`) of each rank's GPU process, all streams and overlap
-- lanes merged (`tokentrace.gaps`: GPU busy = union of kernel intervals), and the
-- `launch->kernel` flows. A gap is a maximal idle interval inside the rank's active window
-- (first kernel start to last kernel end) of at least `min_gap_us`; gaps always have dur > 0.
-- The launch of the kernel that ends the gap is found on the launching host thread
-- (`tokentrace.launches`): its Triton launcher call, its CUDA-graph replay call, else its Proton
-- scope (the launch happened inside it), else the latest torch call before it; a window
-- [launch_ts, launch_end_ts] in which the launch happened, with its `launch_source`. A guessed
-- torch call that ended before the gap proves nothing (the launcher may be an op VizTracer does
-- not log): kernels run in stream order, so one not yet started when the GPU went idle had not
-- been launched (`stream_order`).
-- Classes: `host_late` (the host was still launching when the GPU went idle: the call or scope
-- was open at the gap start or began after it; for a replay, the replay call began after it),
-- `graph_replay` (the next kernel belongs to a CUDA-graph replay launched before the gap: the
-- GPU ran the graph on its own), `launch_overhead` (launched before the gap, dur <=
-- launch_overhead_us), `gpu_queued` (launched before the gap, longer gap: the GPU waited on
-- something else), `no_link` (nothing on the host explains the next kernel).
-- Phase: `startup` for a host-side gap before which the rank's GPU had run fewer than
-- `startup_kernels` kernels and in which the host shows set-up or nothing (`tokentrace.setup`:
-- a module load or initialisation, a compiler's frame, a first call many times longer than the
-- next call of its name: the one-off costs of the first launches, not the steady state a
-- serving engineer tunes), else `steady`. by_host: the host caused the gap (`host_late`, inside the
-- launching thread's traced span: idle before the host trace began or after it ended is not
-- charged to the host).
-- Works on merged traces (one rank or all) and raw Proton traces (one rank per process).
-- All times in ns. Parameters are checked: negative durations are rejected with an error.
CREATE PERFETTO FUNCTION tt_query_gpu_gaps(
  -- Shortest gap reported (>= 0; 0 reports every idle interval between kernels).
  min_gap_ns DURATION,
  -- Longest gap classed `launch_overhead` (>= 0).
  launch_overhead_ns DURATION,
  -- Gaps before the rank's first this-many kernels may be `startup`, on evidence (>= 0; 0: no
  -- gap is). 10 covers the one-off gaps of the first launches on the real traces (a 30-75 ms gap
  -- after kernel 1) and nothing later.
  startup_kernels LONG,
  -- Only this rank tag (e.g. 'TP1'); '' = all ranks.
  rank STRING
)
RETURNS TABLE(
  -- Rank tag, e.g. `TP1` (process name for raw traces).
  rank STRING,
  -- 1-based index of the gap on its rank, in time order (among the gaps reported with these
  -- parameters).
  gap_index LONG,
  -- Gap start: end of the last kernel before it.
  ts TIMESTAMP,
  -- Gap length.
  dur DURATION,
  -- Gap end (ts + dur): start of the next kernel.
  end_ts TIMESTAMP,
  -- Kernel whose end starts the gap (the latest-ending one).
  prev_kernel STRING,
  -- Kernel whose start ends the gap.
  next_kernel STRING,
  -- Its start (= end_ts).
  next_kernel_ts TIMESTAMP,
  -- Start of the host call (or Proton scope) that launched next_kernel (NULL: none found).
  launch_ts TIMESTAMP,
  -- Its end: the launch happened in [launch_ts, launch_end_ts].
  launch_end_ts TIMESTAMP,
  -- Where the launch comes from: `triton_launch` (the Triton launcher call), `graph_replay` (the
  -- CUDA-graph replay call), `proton_scope` (the Proton scope at the source of the kernel's flow),
  -- `host_call` (the latest torch call before the kernel, open at or after the gap start),
  -- `stream_order` (that call ended before the gap: the launch came from a call the trace does not
  -- show, e.g. indexing; in stream order it cannot have come before the GPU went idle; launch_ts
  -- NULL); NULL: no launch found (the host was not traced then).
  launch_source STRING,
  -- Name of that call or scope.
  launch_name STRING,
  -- `host_late`, `graph_replay`, `launch_overhead`, `gpu_queued` or `no_link`.
  gap_class STRING,
  -- Part of the gap the host caused: host_late: from the gap start to the launch, clamped to [0,
  -- dur]; graph_replay, launch_overhead, gpu_queued: 0; no_link: NULL.
  host_caused_ns DURATION,
  -- Kernels the rank's GPU had run before the gap.
  kernels_before LONG,
  -- `startup` (kernels_before < startup_kernels, and the host shows set-up or nothing) or
  -- `steady`.
  phase STRING,
  -- 1 when the host caused the gap (`host_late` while the host was traced), else 0.
  by_host BOOL,
  -- Unix-epoch ns of the gap start (time_origin_unix_ns + ts; NULL without VizTracer anchor or for
  -- raw traces).
  unix_ts LONG,
  -- 1 when the rank's clock offset was estimated with an interval wider than the gap
  -- (`tt_ranks.offset_hi_ns - offset_lo_ns`): within that interval the launch may fall on either
  -- side of the gap's start, so its class is not certain.
  class_uncertain BOOL
)
AS
SELECT
  r.rank,
  g.gap_index, g.ts, g.dur, g.end_ts,
  g.prev_kernel, g.next_kernel, g.next_kernel_ts, g.launch_ts, g.launch_end_ts, g.launch_source,
  g.launch_name,
  g.gap_class, g.host_caused_ns, g.kernels_before, g.phase, g.by_host,
  r.time_origin_unix_ns + g.ts AS unix_ts, g.class_uncertain
FROM tt_gpu_gap_rows($min_gap_ns, $launch_overhead_ns, $startup_kernels) AS g
JOIN tt_ranks AS r USING (rank)
WHERE $rank = '' OR g.rank = $rank
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank, g.gap_index;
