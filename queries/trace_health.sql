-- trace_health: can this trace be trusted? Per rank: Perfetto's import problems, how many
-- kernels have a launch flow and a found launch, VizTracer overflow and filtering, how the
-- clocks were aligned, and whether the rank ran at the same time as the others.
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
--
-- @column rank STRING -  Rank tag, e.g. `TP1` (process name for raw traces).
-- @column dp INT -  Data-parallel index (NULL when the tag has none).
-- @column cp INT -  Context-parallel index (NULL when the tag has none).
-- @column tp INT -  Tensor-parallel index (NULL for raw traces).
-- @column stage STRING -  Profiling stage suffix ('' when none).
-- @column is_merged INT bool  1 for a merged trace's rank, 0 for a raw trace's process.
-- @column stats_errors INT count  Trace-wide sum of Perfetto stats of severity `error`.
-- @column stats_data_loss INT count  Trace-wide sum of Perfetto stats of severity `data_loss`.
-- @column stats_problems STRING -  Those stats as `name=value` pairs, '; '-separated ('' if none).
-- @column kernels INT count  Kernel slices of the rank in the trace (and the torch profiler's
--   memcpy/memset: GPU work too).
-- @column kernels_with_flow INT count  Kernels with a launch->kernel flow.
-- @column kernels_without_flow INT count  Kernels without one (all of them for triton <= 3.8).
-- @column flow_coverage FLOAT fraction  kernels_with_flow / kernels (NULL without kernels).
-- @column kernels_with_launch INT count  Kernels whose launch was found (a host call, a Proton
--   scope or a CUDA runtime call, see `tokentrace.launches`; CUDA-graph replays and launches
--   outside any scope included).
-- @column launch_coverage FLOAT fraction  kernels_with_launch / kernels (NULL without kernels).
-- @column gpu_format STRING -  What recorded the GPU side: `proton` (Triton Proton) or `kineto`
--   (the torch profiler); NULL for raw traces.
-- @column proton_dialect STRING -  `3.9` (triton >= 3.9: lanes, flows, anchor), `3.8` (triton
--   <= 3.8: kernels only) or `kineto`; NULL for raw traces.
-- @column proton_kernels INT count  Kernels in the GPU input, as counted by the merge (NULL raw;
--   the torch profiler's memcpy/memset are counted in `kernels`, not here).
-- @column viz_overflow INT bool  1 when VizTracer's ring buffer wrapped (early host events lost).
-- @column host_slices INT count  Slices with a length on the rank's host process (VizTracer's
--   calls, or the torch profiler's host events when it is the only host profiler).
-- @column host_min_dur_ns INT ns  The shortest of them (NULL without any): 1000 or more over
--   thousands of calls means a `min_duration` filter dropped the short calls, the launch calls
--   among them.
-- @column align_method STRING -  `anchors`, `estimated`, `offset` (given by hand) or
--   `shared_clock` (a torch-profiler trace alone); NULL for raw traces.
-- @column offset_ns INT ns  Offset added to the Proton times.
-- @column offset_lo_ns INT ns  Lower bound of the true offset (NULL when not computed).
-- @column offset_hi_ns INT ns  Upper bound of the true offset (NULL when not computed).
-- @column offset_interval_ns INT ns  offset_hi_ns - offset_lo_ns: how uncertain the alignment is.
-- @column anchor_consistent INT bool  1/0: estimate agrees with the anchors; NULL: not checked.
-- @column gpu_first_ts INT ns  Start of the rank's first kernel (NULL without kernels).
-- @column gpu_last_ts INT ns  End of its last kernel.
-- @column other_ranks INT count  The other ranks with kernels.
-- @column overlapping_ranks INT count  Those whose GPU window [gpu_first_ts, gpu_last_ts]
--   overlaps this rank's: the ranks it ran together with.
-- @column nearest_rank_ns INT ns  Without such a rank: the time between this rank's window and
--   the nearest other rank's (NULL when one overlaps, or no other rank).

INCLUDE PERFETTO MODULE tokentrace.launches;

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
  r.rank, r.dp, r.cp, r.tp, r.stage, r.is_merged,
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
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank

-- @reduce
-- Reduce (SQLite, over the map rows of every rank): each rank's GPU window against the others'.
-- Ranks without kernels have no window: they overlap nothing and are not counted as others.
SELECT
  m.*,
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
