-- host_stalls: for each GPU gap, which Python frames of the launching host thread were running
-- during it, ranked by how much of the gap they own.
--
-- Gaps as in `gpu_gaps` (`tokentrace.gaps`, with their class and phase). Host frames: VizTracer
-- Python frames (`func (file:line)`) of the thread the gap is judged on (`tt_gpu_idle.host_utid`:
-- the thread whose call launched the kernel after the gap, else the rank's launching thread,
-- found from launch evidence; `tokentrace.host_frames`). C calls (`time.sleep`, `builtins.hash`...)
-- count for the Python frame that called them. self_ns = overlap of the gap with the frame's
-- flattened (leaf) time, the instants at which it is the deepest Python frame; total_ns =
-- overlap with the frame's whole interval (inclusive: rolled up to its callers). Frames are
-- ranked within a gap by self_ns desc, then total_ns desc, then name; frame_rank 1 is the
-- gap's cause; the `top` first are returned. A rank without host frames (raw Proton trace)
-- returns no rows. All times in ns.
--
-- @param min_gap_us DURATION_US>=0 100  Shortest gap analysed (µs or with a unit; >= 0).
-- @param launch_overhead_us DURATION_US>=0 10  Longest gap classed `launch_overhead` (>= 0).
-- @param startup_kernels INT>=0 10  Gaps before the rank's first this-many kernels are `startup`
--   (>= 0; see `gpu_gaps`).
-- @param rank STRING ''  Only this rank tag (e.g. 'TP1'); '' = all ranks.
-- @param top INT>=1 5  Frames returned per gap (>= 1).
--
-- @column rank STRING -  Rank tag, e.g. `TP1` (process name for raw traces).
-- @column dp INT -  Data-parallel index (NULL when the tag has none).
-- @column cp INT -  Context-parallel index (NULL when the tag has none).
-- @column tp INT -  Tensor-parallel index (NULL for raw traces).
-- @column stage STRING -  Profiling stage suffix ('' when none).
-- @column gap_index INT -  The gap's index on its rank (as in `gpu_gaps` with the same parameters).
-- @column gap_ts INT ns  Gap start.
-- @column gap_dur INT ns  Gap length.
-- @column gap_class STRING -  `host_late`, `graph_replay`, `launch_overhead`, `gpu_queued` or
--   `no_link` (see `gpu_gaps`).
-- @column phase STRING -  `startup` or `steady` (see `gpu_gaps`).
-- @column by_host INT -  1 when the host caused the gap (see `gpu_gaps`).
-- @column frame_rank INT -  1 = the frame owning most of the gap (the gap's cause).
-- @column frame STRING -  Full VizTracer frame name, `func (file:line)`.
-- @column function STRING -  The frame name without ` (file:line)`.
-- @column depth INT -  Stack depth of the frame on the thread (0 = outermost; C calls counted).
-- @column self_ns INT ns  Overlap of the gap with the frame's leaf (flattened) time.
-- @column total_ns INT ns  Overlap of the gap with the frame's whole interval (with callees).
-- @column self_share FLOAT fraction  self_ns / gap_dur.

INCLUDE PERFETTO MODULE tokentrace.gaps;
INCLUDE PERFETTO MODULE tokentrace.stalls;

WITH
  _gaps AS MATERIALIZED (
    SELECT * FROM tt_gpu_gap_rows(${min_gap_ns}, ${launch_overhead_ns}, ${startup_kernels})
    WHERE ${rank} = '' OR rank = ${rank}
  ),
  _frames AS (
    SELECT * FROM tt_top_gap_frames!(_gaps, ${top})
  )
SELECT
  r.rank, r.dp, r.cp, r.tp, r.stage,
  g.gap_index, g.ts AS gap_ts, g.dur AS gap_dur, g.gap_class, g.phase, g.by_host,
  f.frame_rank, f.frame, tt_frame_function(f.frame) AS function, f.depth,
  f.self_ns, f.total_ns,
  CAST(f.self_ns AS DOUBLE) / g.dur AS self_share
FROM _frames AS f
JOIN _gaps AS g ON g.id = f.gap_id
JOIN tt_ranks AS r ON r.rank = g.rank
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank, g.gap_index, f.frame_rank;
