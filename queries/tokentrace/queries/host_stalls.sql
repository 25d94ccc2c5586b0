-- tokentrace.queries.host_stalls: the rows of the bundled query `host_stalls`
-- (`queries/host_stalls.sql`).

INCLUDE PERFETTO MODULE tokentrace.causes;
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
-- ranked within a gap by self_ns desc, then total_ns desc, then name; the `top` first are
-- returned. frame_rank 1 is the gap's cause, the frame `gap_causes` names: for a gap the host
-- caused, its cause frame comes first (`tokentrace.causes`: the caller of a `gc.collect` or of a
-- sync, the frame owning a busy gap with the standard library's and other libraries' frames
-- counted for their caller); where that frame ran on another thread (the GIL's holder, the
-- producer of work) it is a row of its own, `thread` naming that thread, with the part of the
-- gap the cause explains as self_ns and total_ns. A rank without host frames (raw Proton
-- trace) returns no rows. All times in ns.
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
  -- Stack depth of the frame on the thread (0 = outermost; C calls counted; NULL for a cause
  -- on another thread).
  depth LONG,
  -- The thread of a cause frame that ran on another thread than the launching one (the GIL's
  -- holder, the producer of work); NULL for the launching thread's frames.
  thread STRING,
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
  -- The cause frames of the host-caused gaps (`gap_causes`' `cause_frame`).
  _causes AS MATERIALIZED (
    SELECT
      c.gap_id, c.cause_frame, c.cause_ns,
      IIF(c.cause_kind = 'gil' OR c.cause_thread IS NOT t.name, c.cause_thread, NULL) AS thread
    FROM tt_gap_causes!(_gaps) AS c
    JOIN tt_gpu_idle AS i ON i.id = c.gap_id
    LEFT JOIN thread AS t ON t.utid = i.host_utid
    WHERE c.cause_frame IS NOT NULL
  ),
  -- The launching thread's frames, one more than asked (the cause may come from below the
  -- `top` first: it then takes the place of the last).
  _frames AS MATERIALIZED (
    SELECT * FROM tt_top_gap_frames!(_gaps, $top + 1)
  ),
  -- A cause on another thread, or one of the launching thread's frames below the `top` + 1.
  _cause_rows AS (
    SELECT c.gap_id, c.cause_frame AS frame, NULL AS depth, c.thread,
      c.cause_ns AS self_ns, c.cause_ns AS total_ns, 0 AS frame_rank
    FROM _causes AS c
    WHERE c.thread IS NOT NULL OR NOT EXISTS (
      SELECT 1 FROM _frames AS f WHERE f.gap_id = c.gap_id AND f.frame = c.cause_frame)
  ),
  _ranked AS (
    SELECT
      u.*,
      ROW_NUMBER() OVER (
        PARTITION BY u.gap_id
        ORDER BY IIF(u.frame = c.cause_frame AND u.thread IS c.thread, 0, 1), u.frame_rank
      ) AS cause_first
    FROM (
      SELECT gap_id, frame, depth, NULL AS thread, self_ns, total_ns, frame_rank FROM _frames
      UNION ALL
      SELECT * FROM _cause_rows
    ) AS u
    LEFT JOIN _causes AS c USING (gap_id)
  )
SELECT
  r.rank,
  g.gap_index, g.ts AS gap_ts, g.dur AS gap_dur, g.gap_class, g.phase, g.by_host,
  f.cause_first AS frame_rank, f.frame, tt_frame_function(f.frame) AS function, f.depth,
  f.thread, f.self_ns, f.total_ns,
  CAST(f.self_ns AS DOUBLE) / g.dur AS self_share
FROM _ranked AS f
JOIN _gaps AS g ON g.id = f.gap_id
JOIN tt_ranks AS r ON r.rank = g.rank
WHERE f.cause_first <= $top
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank, g.gap_index, f.cause_first;
