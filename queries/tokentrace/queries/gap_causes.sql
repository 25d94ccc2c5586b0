-- tokentrace.queries.gap_causes: the rows of the bundled query `gap_causes`
-- (`queries/gap_causes.sql`).

INCLUDE PERFETTO MODULE tokentrace.causes;
INCLUDE PERFETTO MODULE tokentrace.gaps;
INCLUDE PERFETTO MODULE tokentrace.gpu_waits;
INCLUDE PERFETTO MODULE tokentrace.stalls;

-- Which host function caused each GPU gap, and which gaps are stalls?
--
-- Every `gpu_gaps` row (same parameters, same gap_index) with its cause: for a host-caused gap, why
-- the host was late (`tokentrace.causes`: gc, no_work, blocking, gil, sync, busy, unknown), which
-- thread, frame and C call; for a GPU-side wait (`gpu_queued`: the next kernel was launched in
-- time and sat queued), `gpu_wait` and what the GPU waited on (`tokentrace.gpu_waits`: a stream
-- wait on an event, a graph waiting to start, a collective), with the launching thread's frame as
-- the victim, not the cause; for the others, the Python frame of the launching host thread with
-- the most self time in the gap (the gap's `host_stalls` row with frame_rank 1). Gaps during which
-- no Python frame ran on that thread (raw Proton traces, an idle host) have NULL cause columns. A
-- **stall** is a `steady` gap the host caused (`by_host` = 1: `host_late`) of at least
-- stall_min_us, unless the engine was waiting for work then (`no_work`: the gap is idle the host
-- could not have filled) or the gap overlaps a CUDA-graph stream capture (`tt_capture_windows`:
-- kernels captured, not run); shorter steady host gaps are the per-step host overhead (launch paths,
-- tokenizing), not stalls. `tokentrace analyze` writes `label` on its timeline and lists the
-- longest gaps per rank (dur_rank). All times in ns.
CREATE PERFETTO FUNCTION tt_query_gap_causes(
  -- Shortest gap reported (>= 0).
  min_gap_ns DURATION,
  -- Longest gap classed `launch_overhead` (>= 0).
  launch_overhead_ns DURATION,
  -- Gaps before the rank's first this-many kernels are `startup` (>= 0; see `gpu_gaps`).
  startup_kernels LONG,
  -- Steady host-caused gaps at least this long are stalls (>= 0).
  stall_min_ns DURATION,
  -- Only this rank tag (e.g. 'TP1'); '' = all ranks.
  rank STRING
)
RETURNS TABLE(
  -- Rank tag, e.g. `TP1` (process name for raw traces).
  rank STRING,
  -- The gap's index on its rank (as in `gpu_gaps` with the same parameters).
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
  -- `startup` or `steady` (see `gpu_gaps`).
  phase STRING,
  -- 1 when the host caused the gap (see `gpu_gaps`).
  by_host BOOL,
  -- Unix-epoch ns of the gap start (NULL without VizTracer anchor).
  unix_ts LONG,
  -- 1 when the gap is shorter than its rank's estimated clock-offset interval (see `gpu_gaps`).
  class_uncertain BOOL,
  -- Why the host was late (host-caused gaps; `tokentrace.causes`): `gc`, `no_work`, `blocking`,
  -- `gil`, `sync`, `busy` or `unknown`; `gpu_wait` for a GPU-side wait (`gpu_queued`); NULL for
  -- the other gaps the host did not cause.
  cause_kind STRING,
  -- The thread that caused it: the gap's launching thread, for `gil` the thread holding the GIL,
  -- for `no_work` the thread that was not waiting for work itself.
  cause_thread STRING,
  -- The cause's function (frame name without ` (file:line)`); for gaps the host did not cause, the
  -- frame with the most self time in the gap; NULL for a GPU-side wait (see `victim_frame`).
  cause_function STRING,
  -- The cause's full VizTracer frame name, `func (file:line)`.
  cause_frame STRING,
  -- The C call behind it (`time.sleep`, `gc.collect`, `Tensor.item`, `builtins.sorted`,
  -- `torch._C._nn.scaled_dot_product_attention` ...); NULL for busy Python. For a GPU-side wait,
  -- what the GPU waited on: the stream-wait call (`hipStreamWaitEvent`), the graph launch, the
  -- collective kernel (NULL: nothing in the trace shows it).
  cause_call STRING,
  -- The torch op (`aten::...`, the torch profiler's `cpu_op`) inside which the next kernel was
  -- launched: the innermost one around its CUDA runtime call; NULL without torch-profiler ops
  -- (VizTracer and Proton, or a profile without CPU ops).
  cause_op STRING,
  -- The part of the gap the cause explains.
  cause_ns DURATION,
  -- For a GPU-side wait: the engine's frame the launching thread was in meanwhile (often blocked in
  -- a sync or a synchronous copy behind the queued kernel; `tokentrace.gpu_waits`): the victim, not
  -- the cause. NULL otherwise.
  victim_frame STRING,
  -- What the timeline writes over the gap: cause_function, or `(no host frame)`; prefixed by the
  -- cause kind unless busy (`gil: sort_pending_responses`), and by `start-up: ` for a `startup`
  -- gap; for a GPU-side wait, `gpu_wait: ` and what it waited on (`gpu_wait:
  -- hipStreamWaitEvent, on an event recorded before the trace began, the host meanwhile in
  -- populate_from_forward_batch (hipMemcpyWithStream)`).
  label STRING,
  -- 1 for a stall: phase `steady`, by_host = 1, dur >= stall_min_us and a cause other than
  -- `no_work` (the engine waited for work: idle no host code could fill).
  is_stall BOOL,
  -- ts - the rank's first kernel start: the gap's place on the rank's timeline (per rank, so a
  -- rank's rows do not depend on the other ranks).
  start_ns DURATION,
  -- 1 = the rank's longest gap (ties: the earlier gap first).
  dur_rank LONG
)
AS
WITH
  _gaps AS MATERIALIZED (
    SELECT * FROM tt_gpu_gap_rows($min_gap_ns, $launch_overhead_ns, $startup_kernels)
    WHERE $rank = '' OR rank = $rank
  ),
  -- Gaps the host did not cause: their frame with the most self time (host-caused gaps get
  -- their cause from tt_gap_causes, which reads their frames itself).
  _ranked AS (
    SELECT * FROM tt_top_gap_frames!((SELECT * FROM _gaps WHERE by_host = 0), 1)
  ),
  _waits AS MATERIALIZED (SELECT * FROM tt_gpu_wait_causes!(_gaps)),
  _causes AS (
    SELECT gap_id, frame, tt_frame_function(frame) AS function, self_ns
    FROM _ranked
    WHERE frame_rank = 1
  ),
  -- The torch op that launched each host-caused gap's next kernel: the innermost `cpu_op`
  -- around the CUDA runtime call at the source of its flow (per gap, by id: no walk for the
  -- other kernels).
  _ops AS (
    SELECT
      g.id AS gap_id,
      (
        SELECT a.name FROM ancestor_slice(k.launch_id) AS a
        WHERE a.category = 'cpu_op'
        ORDER BY a.depth DESC
        LIMIT 1
      ) AS op
    FROM _gaps AS g
    CROSS JOIN tt_gpu_idle AS i ON i.id = g.id
    CROSS JOIN tt_kernels AS k ON k.id = i.next_kernel_id
    WHERE g.by_host = 1 AND g.launch_source IN ('runtime_call', 'graph_replay')
      AND k.launch_id IS NOT NULL
  ),
  -- The timeline's origin is the first kernel of any rank, whatever the rank filter.
  _origin AS (
    SELECT rank, MIN(ts) AS first_ts FROM tt_gpu_busy GROUP BY rank
  )
SELECT
  r.rank,
  g.gap_index, g.ts, g.dur, g.end_ts,
  g.prev_kernel, g.next_kernel, g.next_kernel_ts, g.launch_ts, g.launch_end_ts, g.launch_source,
  g.launch_name,
  g.gap_class, g.host_caused_ns, g.kernels_before, g.phase, g.by_host,
  r.time_origin_unix_ns + g.ts AS unix_ts, g.class_uncertain,
  IIF(w.gap_id IS NOT NULL, 'gpu_wait', k.cause_kind) AS cause_kind,
  IIF(w.gap_id IS NOT NULL, NULL, k.cause_thread) AS cause_thread,
  IIF(w.gap_id IS NOT NULL, NULL, IFNULL(k.cause_function, c.function)) AS cause_function,
  IIF(w.gap_id IS NOT NULL, NULL, IFNULL(k.cause_frame, c.frame)) AS cause_frame,
  IIF(w.gap_id IS NOT NULL, w.wait_call, k.cause_call) AS cause_call,
  op.op AS cause_op,
  IIF(w.gap_id IS NOT NULL, g.dur, IFNULL(k.cause_ns, c.self_ns)) AS cause_ns,
  w.victim_frame,
  IIF(w.gap_id IS NOT NULL, w.label,
      IIF(g.phase = 'startup', 'start-up: ', '')
        || IIF(k.cause_kind IS NOT NULL AND k.cause_kind != 'busy', k.cause_kind || ': ', '')
        || IFNULL(IFNULL(k.cause_function, c.function), '(no host frame)')) AS label,
  -- A gap where the engine waited for work is no stall: no host code could have filled it; nor
  -- is one over a stream capture, whose kernels were recorded, not run.
  IIF(g.phase = 'steady' AND g.by_host = 1 AND g.dur >= $stall_min_ns
      AND IFNULL(k.cause_kind, '') != 'no_work'
      AND NOT EXISTS (SELECT 1 FROM tt_capture_windows AS cw
                      WHERE cw.rank = g.rank AND cw.ts < g.ts + g.dur AND g.ts < cw.ts + cw.dur),
      1, 0) AS is_stall,
  g.ts - o.first_ts AS start_ns,
  ROW_NUMBER() OVER (PARTITION BY g.rank ORDER BY g.dur DESC, g.gap_index) AS dur_rank
FROM _gaps AS g
JOIN tt_ranks AS r USING (rank)
JOIN _origin AS o USING (rank)
LEFT JOIN _causes AS c ON c.gap_id = g.id
LEFT JOIN _ops AS op ON op.gap_id = g.id
LEFT JOIN tt_gap_causes!(_gaps) AS k ON k.gap_id = g.id
LEFT JOIN _waits AS w ON w.gap_id = g.id
ORDER BY r.dp, r.cp, r.tp, r.stage, r.rank, g.gap_index;
