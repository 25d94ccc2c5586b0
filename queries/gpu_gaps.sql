-- gpu_gaps: when did each rank's GPU sit idle, and was the host late to launch the next kernel?
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
-- Phase: `startup` for a gap before which the rank's GPU had run fewer than `startup_kernels`
-- kernels (the first launches after the profiler starts pay CUPTI initialisation, lazy
-- CUDA/NCCL initialisation and JIT compilation: one-off gaps, not the steady state a serving
-- engineer tunes), else `steady`. by_host: the host caused the gap (`host_late`, inside the
-- launching thread's traced span: idle before the host trace began or after it ended is not
-- charged to the host).
-- Works on merged traces (one rank or all) and raw Proton traces (one rank per process).
-- All times in ns. Parameters are checked: negative durations are rejected with an error.
--
-- @param min_gap_us DURATION_US>=0 100  Shortest gap reported (µs, or 500ns, 2ms...; >= 0; 0
--   reports every idle interval between kernels).
-- @param launch_overhead_us DURATION_US>=0 10  Longest gap classed `launch_overhead` (>= 0).
-- @param startup_kernels INT>=0 10  Gaps before the rank's first this-many kernels are `startup`
--   (>= 0; 0: no gap is). 10 covers the one-off gaps of the first launches on the real traces
--   (a 30-75 ms gap after kernel 1, sub-ms gaps after kernels 2-4) and nothing later.
-- @param rank STRING ''  Only this rank tag (e.g. 'TP1'); '' = all ranks.
--
-- @column rank STRING -  Rank tag, e.g. `TP1` (process name for raw traces).
-- @column dp INT -  Data-parallel index (NULL when the tag has none).
-- @column cp INT -  Context-parallel index (NULL when the tag has none).
-- @column tp INT -  Tensor-parallel index (NULL for raw traces).
-- @column stage STRING -  Profiling stage suffix ('' when none).
-- @column gap_index INT -  1-based index of the gap on its rank, in time order (among the gaps
--   reported with these parameters).
-- @column ts INT ns  Gap start: end of the last kernel before it.
-- @column dur INT ns  Gap length.
-- @column end_ts INT ns  Gap end (ts + dur): start of the next kernel.
-- @column prev_kernel STRING -  Kernel whose end starts the gap (the latest-ending one).
-- @column next_kernel STRING -  Kernel whose start ends the gap.
-- @column next_kernel_ts INT ns  Its start (= end_ts).
-- @column launch_ts INT ns  Start of the host call (or Proton scope) that launched next_kernel
--   (NULL: none found).
-- @column launch_end_ts INT ns  Its end: the launch happened in [launch_ts, launch_end_ts].
-- @column launch_source STRING -  Where the launch comes from: `triton_launch` (the Triton
--   launcher call), `graph_replay` (the CUDA-graph replay call), `proton_scope` (the Proton scope
--   at the source of the kernel's flow), `host_call` (the latest torch call before the kernel,
--   open at or after the gap start), `stream_order` (that call ended before the gap: the launch
--   came from a call the trace does not show, e.g. indexing; in stream order it cannot have
--   come before the GPU went idle; launch_ts NULL); NULL: no launch found (the host was not
--   traced then).
-- @column launch_name STRING -  Name of that call or scope.
-- @column gap_class STRING -  `host_late`, `graph_replay`, `launch_overhead`, `gpu_queued` or
--   `no_link`.
-- @column host_caused_ns INT ns  Part of the gap the host caused: host_late: from the gap start
--   to the launch, clamped to [0, dur]; graph_replay, launch_overhead, gpu_queued: 0; no_link:
--   NULL.
-- @column kernels_before INT count  Kernels the rank's GPU had run before the gap.
-- @column phase STRING -  `startup` (kernels_before < startup_kernels) or `steady`.
-- @column by_host INT -  1 when the host caused the gap (`host_late` while the host was traced),
--   else 0.
-- @column unix_ts INT ns  Unix-epoch ns of the gap start (time_origin_unix_ns + ts; NULL
--   without VizTracer anchor or for raw traces).
-- @column class_uncertain INT -  1 when the rank's clock offset was estimated with an interval
--   wider than the gap (`tt_ranks.offset_hi_ns - offset_lo_ns`): within that interval the
--   launch may fall on either side of the gap's start, so its class is not certain.

INCLUDE PERFETTO MODULE tokentrace.gaps;

SELECT
  r.rank, r.dp, r.cp, r.tp, r.stage,
  g.gap_index, g.ts, g.dur, g.end_ts,
  g.prev_kernel, g.next_kernel, g.next_kernel_ts, g.launch_ts, g.launch_end_ts, g.launch_source,
  g.launch_name,
  g.gap_class, g.host_caused_ns, g.kernels_before, g.phase, g.by_host,
  r.time_origin_unix_ns + g.ts AS unix_ts, g.class_uncertain
FROM tt_gpu_gap_rows(${min_gap_ns}, ${launch_overhead_ns}, ${startup_kernels}) AS g
JOIN tt_ranks AS r USING (rank)
WHERE ${rank} = '' OR g.rank = ${rank}
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank, g.gap_index;
