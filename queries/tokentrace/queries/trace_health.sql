-- tokentrace.queries.trace_health: the rows of the bundled query `trace_health`
-- (`queries/trace_health.sql`), its per-rank map part.

INCLUDE PERFETTO MODULE tokentrace.launches;

-- Can this trace be trusted? Per rank: Perfetto's import problems, how many kernels have a launch
-- flow and a found launch, VizTracer overflow and filtering, how the clocks were aligned, and
-- whether the rank ran at the same time as the others.
--
-- This function gives the per-rank rows (the map) of the cross-rank query `trace_health`: its
-- reduce, after `-- @reduce` in `queries/trace_health.sql`, compares them across ranks and declares
-- the query's columns.
--
-- Reads Perfetto's `stats` table (trace-wide: repeated on every rank's row), kernel slices and
-- flows (`tokentrace.kernels`, `tokentrace.launches`), the host process's slices and the merge
-- record (`tokentrace.ranks`; NULL alignment columns for raw traces). After a correct merge
-- `stats_errors` and `stats_data_loss` are 0. A cross-rank query (map per rank in PerfettoSQL,
-- reduce after `-- @reduce` in SQLite: `tokentrace.catalog.reduce`): the reduce compares the
-- ranks' GPU windows, so ranks recorded one after the other (never running together) are
-- found; their cross-rank figures (rank skew, collectives) compare nothing real. VizTracer
-- writes no `min_duration` in its metadata: a filter shows as a floor under the host slices'
-- lengths (unfiltered, most calls of builtins last under 1 µs). No parameters.
CREATE PERFETTO FUNCTION tt_query_trace_health_map()
RETURNS TABLE(
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
  -- Kernel slices of the rank in the trace (and the torch profiler's memcpy/memset: GPU work too).
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
  -- What recorded the GPU side: `proton` (Triton Proton) or `kineto` (the torch profiler); NULL for
  -- raw traces.
  gpu_format STRING,
  -- `3.9` (triton >= 3.9: lanes, flows, anchor), `3.8` (triton <= 3.8: kernels only) or `kineto`;
  -- NULL for raw traces.
  proton_dialect STRING,
  -- Kernels in the GPU input, as counted by the merge (NULL raw; the torch profiler's memcpy/memset
  -- are counted in `kernels`, not here).
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
  gpu_last_ts TIMESTAMP
)
AS
-- Map (per rank): the rank's facts.

WITH
  _tt_stats AS (
    SELECT
      IFNULL(SUM(IIF(severity = 'error', value, 0)), 0) AS stats_errors,
      IFNULL(SUM(IIF(severity = 'data_loss', value, 0)), 0) AS stats_data_loss,
      IFNULL(GROUP_CONCAT(name || '=' || value, '; '), '') AS stats_problems
    FROM (
      SELECT name, severity, SUM(value) AS value
      FROM stats
      WHERE severity IN ('error', 'data_loss') AND value > 0
      GROUP BY name, severity
      ORDER BY name
    )
  ),
  _tt_rank_kernels AS (
    SELECT k.rank, COUNT(*) AS kernels, COUNT(k.launch_id) AS kernels_with_flow,
      COUNT(l.launch_source) AS kernels_with_launch
    FROM tt_kernels AS k
    JOIN tt_kernel_launches AS l USING (id)
    GROUP BY k.rank
  ),
  _tt_gpu_window AS (
    SELECT rank, MIN(ts) AS gpu_first_ts, MAX(ts + dur) AS gpu_last_ts
    FROM tt_kernels
    GROUP BY rank
  ),
  -- (instants and unfinished slices have no length: left out)
  _tt_host AS (
    SELECT r.rank, COUNT(*) AS host_slices, MIN(s.dur) AS host_min_dur_ns
    FROM tt_ranks AS r
    JOIN thread AS t ON t.upid = r.host_upid
    JOIN thread_track AS tt USING (utid)
    JOIN slice AS s ON s.track_id = tt.id
    WHERE s.dur > 0
    GROUP BY r.rank
  )
SELECT
  r.rank, r.is_merged,
  s.stats_errors, s.stats_data_loss, s.stats_problems,
  IFNULL(k.kernels, 0) AS kernels,
  IFNULL(k.kernels_with_flow, 0) AS kernels_with_flow,
  IFNULL(k.kernels, 0) - IFNULL(k.kernels_with_flow, 0) AS kernels_without_flow,
  CAST(k.kernels_with_flow AS DOUBLE) / k.kernels AS flow_coverage,
  IFNULL(k.kernels_with_launch, 0) AS kernels_with_launch,
  CAST(k.kernels_with_launch AS DOUBLE) / k.kernels AS launch_coverage,
  r.gpu_format,
  r.proton_dialect,
  r.proton_kernels,
  r.viz_overflow,
  IFNULL(h.host_slices, 0) AS host_slices,
  h.host_min_dur_ns,
  r.align_method,
  r.offset_ns,
  r.offset_lo_ns,
  r.offset_hi_ns,
  r.offset_hi_ns - r.offset_lo_ns AS offset_interval_ns,
  r.anchor_consistent,
  w.gpu_first_ts,
  w.gpu_last_ts
FROM tt_ranks AS r
CROSS JOIN _tt_stats AS s
LEFT JOIN _tt_rank_kernels AS k USING (rank)
LEFT JOIN _tt_gpu_window AS w USING (rank)
LEFT JOIN _tt_host AS h USING (rank)
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank;
