-- trace_health: can this trace be trusted? Per rank: Perfetto's import problems, how many kernels
-- have a launch flow and a found launch, VizTracer overflow and filtering, how the clocks were
-- aligned, and whether the rank ran at the same time as the others.
--
-- Its parameters, columns and method: `tt_query_trace_health_map` in the module
-- `tokentrace.queries.trace_health`.

INCLUDE PERFETTO MODULE tokentrace.queries.trace_health;

SELECT * FROM tt_query_trace_health_map()

-- @reduce
-- Reduce (SQLite, over the map rows of every rank): each rank's GPU window against the others'.
-- Its result's columns: the SELECT after this must return them, in this order (the runner
-- checks it).
CREATE TEMP TABLE trace_health_result(
  -- Rank tag, e.g. `TP1` (process name for raw traces).
  rank STRING,
  -- 1 for a merged trace's rank, 0 for a raw trace's process.
  is_merged BOOL,
  -- Trace-wide sum of Perfetto stats of severity `error`.
  stats_errors LONG,
  -- Trace-wide sum of Perfetto stats of severity `data_loss`.
  stats_data_loss LONG,
  -- Those stats as `name=value` pairs, '; '-separated ('' if none).
  stats_problems STRING,
  -- Kernel slices of the rank in the trace (and the torch profiler's memcpy/memset: GPU work
  -- too).
  kernels LONG,
  -- Kernels with a launch->kernel flow.
  kernels_with_flow LONG,
  -- Kernels without one (all of them for triton <= 3.8).
  kernels_without_flow LONG,
  -- kernels_with_flow / kernels (NULL without kernels).
  flow_coverage DOUBLE,
  -- Kernels whose launch was found (a host call, a Proton scope or a CUDA runtime call, see
  -- `tokentrace.launches`; CUDA-graph replays and launches outside any scope included).
  kernels_with_launch LONG,
  -- kernels_with_launch / kernels (NULL without kernels).
  launch_coverage DOUBLE,
  -- What recorded the GPU side: `proton` (Triton Proton) or `kineto` (the torch profiler); NULL
  -- for raw traces.
  gpu_format STRING,
  -- `3.9` (triton >= 3.9: lanes, flows, anchor), `3.8` (triton <= 3.8: kernels only) or
  -- `kineto`; NULL for raw traces.
  proton_dialect STRING,
  -- Kernels in the GPU input, as counted by the merge (NULL raw; the torch profiler's
  -- memcpy/memset are counted in `kernels`, not here).
  proton_kernels LONG,
  -- 1 when VizTracer's ring buffer wrapped (early host events lost).
  viz_overflow BOOL,
  -- Slices with a length on the rank's host process (VizTracer's calls, or the torch profiler's
  -- host events when it is the only host profiler).
  host_slices LONG,
  -- The shortest of them (NULL without any): 1000 or more over thousands of calls means a
  -- `min_duration` filter dropped the short calls, the launch calls among them.
  host_min_dur_ns DURATION,
  -- `anchors`, `estimated`, `offset` (given by hand) or `shared_clock` (a torch-profiler trace
  -- alone); NULL for raw traces.
  align_method STRING,
  -- Offset added to the Proton times.
  offset_ns DURATION,
  -- Lower bound of the true offset (NULL when not computed).
  offset_lo_ns DURATION,
  -- Upper bound of the true offset (NULL when not computed).
  offset_hi_ns DURATION,
  -- offset_hi_ns - offset_lo_ns: how uncertain the alignment is.
  offset_interval_ns DURATION,
  -- 1/0: estimate agrees with the anchors; NULL: not checked.
  anchor_consistent BOOL,
  -- Start of the rank's first kernel (NULL without kernels).
  gpu_first_ts TIMESTAMP,
  -- End of its last kernel.
  gpu_last_ts TIMESTAMP,
  -- The other ranks with kernels.
  other_ranks LONG,
  -- Those whose GPU window [gpu_first_ts, gpu_last_ts] overlaps this rank's: the ranks it ran
  -- together with.
  overlapping_ranks LONG,
  -- Without such a rank: the time between this rank's window and the nearest other rank's (NULL
  -- when one overlaps, or no other rank).
  nearest_rank_ns DURATION
);

-- Ranks without kernels have no window: they overlap nothing and are not counted as others.
SELECT
  m.rank, m.is_merged, m.stats_errors, m.stats_data_loss, m.stats_problems, m.kernels,
  m.kernels_with_flow, m.kernels_without_flow, m.flow_coverage, m.kernels_with_launch,
  m.launch_coverage, m.gpu_format, m.proton_dialect, m.proton_kernels, m.viz_overflow,
  m.host_slices, m.host_min_dur_ns, m.align_method, m.offset_ns, m.offset_lo_ns, m.offset_hi_ns,
  m.offset_interval_ns, m.anchor_consistent, m.gpu_first_ts, m.gpu_last_ts,
  (SELECT COUNT(*) FROM map AS o
   WHERE o.rank != m.rank AND o.gpu_first_ts IS NOT NULL) AS other_ranks,
  (SELECT COUNT(*) FROM map AS o
   WHERE o.rank != m.rank AND o.gpu_first_ts < m.gpu_last_ts
     AND m.gpu_first_ts < o.gpu_last_ts) AS overlapping_ranks,
  IIF(
    EXISTS (SELECT 1 FROM map AS o
            WHERE o.rank != m.rank AND o.gpu_first_ts < m.gpu_last_ts
              AND m.gpu_first_ts < o.gpu_last_ts),
    NULL,
    (SELECT MIN(MAX(o.gpu_first_ts - m.gpu_last_ts, m.gpu_first_ts - o.gpu_last_ts))
     FROM map AS o WHERE o.rank != m.rank AND o.gpu_first_ts IS NOT NULL)
  ) AS nearest_rank_ns
FROM map AS m
ORDER BY m.dp, m.cp, m.tp, m.stage, m.rank;
