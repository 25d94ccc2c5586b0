-- tokentrace.queries.host_stalls: the rows of the bundled query `host_stalls`
-- (`queries/host_stalls.sql`).

INCLUDE PERFETTO MODULE tokentrace.gaps;
INCLUDE PERFETTO MODULE tokentrace.stalls;

-- For each GPU gap, which Python frames of the launching host thread were running during it, ranked
-- by how much of the gap they own.
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
CREATE PERFETTO FUNCTION tt_query_host_stalls(
  -- Shortest gap analysed (>= 0).
  min_gap_ns DURATION,
  -- Longest gap classed `launch_overhead` (>= 0).
  launch_overhead_ns DURATION,
  -- Gaps before the rank's first this-many kernels are `startup` (>= 0; see `gpu_gaps`).
  startup_kernels LONG,
  -- Only this rank tag (e.g. 'TP1'); '' = all ranks.
  rank STRING,
  -- Frames returned per gap (>= 1).
  top LONG
)
RETURNS TABLE(
  -- Rank tag, e.g. `TP1` (process name for raw traces).
  rank STRING,
  -- Data-parallel index (NULL when the tag has none).
  dp LONG,
  -- Context-parallel index (NULL when the tag has none).
  cp LONG,
  -- Tensor-parallel index (NULL for raw traces).
  tp LONG,
  -- Profiling stage suffix ('' when none).
  stage STRING,
  -- The gap's index on its rank (as in `gpu_gaps` with the same parameters).
  gap_index LONG,
  -- Gap start.
  gap_ts TIMESTAMP,
  -- Gap length.
  gap_dur DURATION,
  -- `host_late`, `graph_replay`, `launch_overhead`, `gpu_queued` or `no_link` (see `gpu_gaps`).
  gap_class STRING,
  -- `startup` or `steady` (see `gpu_gaps`).
  phase STRING,
  -- 1 when the host caused the gap (see `gpu_gaps`).
  by_host BOOL,
  -- 1 = the frame owning most of the gap (the gap's cause).
  frame_rank LONG,
  -- Full VizTracer frame name, `func (file:line)`.
  frame STRING,
  -- The frame name without ` (file:line)`.
  function STRING,
  -- Stack depth of the frame on the thread (0 = outermost; C calls counted).
  depth LONG,
  -- Overlap of the gap with the frame's leaf (flattened) time.
  self_ns DURATION,
  -- Overlap of the gap with the frame's whole interval (with callees).
  total_ns DURATION,
  -- self_ns / gap_dur.
  self_share DOUBLE
)
AS
WITH
  _gaps AS MATERIALIZED (
    SELECT * FROM tt_gpu_gap_rows($min_gap_ns, $launch_overhead_ns, $startup_kernels)
    WHERE $rank = '' OR rank = $rank
  ),
  _frames AS (
    SELECT * FROM tt_top_gap_frames!(_gaps, $top)
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
