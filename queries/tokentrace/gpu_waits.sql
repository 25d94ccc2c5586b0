-- tokentrace.gpu_waits: what the GPU waited on in a GPU-side gap (`gpu_queued`: the next kernel
-- was launched in time and sat queued, see `tt_gap_class`).
--
-- The evidence, in this order:
--   * a stream wait on an event (`cudaStreamWaitEvent`, `cuStreamWaitEvent`, `hipStreamWaitEvent`)
--     that the thread of the next kernel's launch call issued after the launch of the kernel
--     before the gap and before the next kernel's launch: the next kernel's stream waited for that event. Where the trace
--     has the event's record call (the torch profiler's `cuda_sync` "Stream Wait Event" names it
--     by correlation id, `wait_on_cuda_event_record_corr_id`; else any event-record call of the
--     rank before the wait), its name and thread are given; none at all means the event was
--     recorded before the trace began (SGLang's decode on MI300X: a 463 ms wait);
--   * a graph launched before the gap whose first node ran only after it (`graph_launch`);
--   * a collective (an NCCL/RCCL kernel): it waits for the other ranks;
--   * else the kernel was queued behind work the trace does not show.
-- The launching thread meanwhile often blocks in a sync or a synchronous copy behind the queued
-- kernel: a victim, never the cause (`gap_causes.victim_frame`). Times in ns.

INCLUDE PERFETTO MODULE tokentrace.gaps;
INCLUDE PERFETTO MODULE tokentrace.host_frames;

-- The stream-wait and event-record calls of each rank's processes (CUDA runtime and driver, HIP).
CREATE PERFETTO TABLE _tt_event_calls AS
SELECT
  s.id, rp.rank, t.utid, s.ts, s.dur, s.name,
  IIF(s.name GLOB '*StreamWaitEvent*', 'wait', 'record') AS kind,
  EXTRACT_ARG(s.arg_set_id, 'args.correlation') AS correlation
FROM slice AS s
JOIN thread_track AS tt ON s.track_id = tt.id
JOIN thread AS t USING (utid)
JOIN tt_rank_processes AS rp ON rp.upid = t.upid
WHERE s.name IN ('cudaStreamWaitEvent', 'cuStreamWaitEvent', 'hipStreamWaitEvent',
                 'cudaEventRecord', 'cudaEventRecordWithFlags', 'cuEventRecord',
                 'cuEventRecordWithFlags', 'hipEventRecord', 'hipEventRecordWithFlags')
ORDER BY rp.rank, s.ts;

-- What the GPU waited on in each gap of `gaps` (a table or subquery with the columns of
-- `tt_gpu_gap_rows`); only its `gpu_queued` gaps get a row.
-- Columns: `gap_id`, `wait_call` (the stream-wait call, the graph launch, the collective kernel;
-- NULL: none seen), `wait_detail` (one phrase: what it waited for), `wait_ts` (the wait call's
-- start, ns; NULL without one), `victim_frame` (the deepest Python frame of the engine's own code,
-- not of a library, `_tt_is_library_frame!`, open on the launching thread at the gap's middle),
-- `victim_call` (the deepest call open then on the thread of the next kernel's launch call: the
-- sync or synchronous copy the host sat in), `label` (all of it in one line: `gpu_wait:
-- hipStreamWaitEvent, on an event recorded before the trace began, the host meanwhile in
-- populate_from_forward_batch (hipMemcpyWithStream)`).
CREATE PERFETTO MACRO tt_gpu_wait_causes(
  -- The gaps (columns of `tt_gpu_gap_rows`).
  gaps TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  WITH
  _waits AS MATERIALIZED (
  SELECT
    v.gap_id,
    CASE
      WHEN v.wait_id IS NOT NULL THEN v.wait_name
      WHEN v.first_node THEN v.launch_name
      WHEN v.collective THEN v.next_kernel
    END AS wait_call,
    CASE
      WHEN v.wait_id IS NOT NULL AND v.recorded_by IS NOT NULL
        THEN 'on an event recorded by ' || v.recorded_by
      WHEN v.wait_id IS NOT NULL THEN 'on an event recorded before the trace began'
      WHEN v.first_node
        THEN 'graph launched ' || PRINTF('%.2f', (v.next_kernel_ts - v.launch_end_ts) / 1e6)
          || ' ms before its first node ran'
      WHEN v.collective THEN 'a collective: waiting for the other ranks'
      ELSE 'queued ' || PRINTF('%.2f', (v.next_kernel_ts - v.launch_end_ts) / 1e6)
        || ' ms after its launch (' || IFNULL(v.launch_name, 'launch') || ')'
    END AS wait_detail,
    v.wait_ts, v.mid, v.host_utid, v.call_utid
  FROM (
    SELECT
      x.*,
      (
        SELECT r.name || ' on ' || IFNULL(th.name, 'thread ' || th.tid)
        FROM _tt_event_calls AS r
        JOIN thread AS th USING (utid)
        WHERE r.rank = x.rank AND r.kind = 'record' AND r.ts < x.wait_ts
          AND (x.record_correlation IS NULL OR r.correlation = x.record_correlation)
        ORDER BY r.ts DESC
        LIMIT 1
      ) AS recorded_by
    FROM (
      SELECT
        u.*, c.name AS wait_name, c.ts AS wait_ts,
        -- the torch profiler's `cuda_sync` "Stream Wait Event" of that call (its arrow's end)
        -- names the record call by correlation id
        (
          SELECT EXTRACT_ARG(sy.arg_set_id, 'args.wait_on_cuda_event_record_corr_id')
          FROM flow AS f
          JOIN slice AS sy ON sy.id = f.slice_in
          WHERE f.slice_out = u.wait_id AND sy.category = 'cuda_sync'
          LIMIT 1
        ) AS record_correlation
      FROM (
        SELECT
          g.id AS gap_id, g.rank, g.next_kernel, g.next_kernel_ts, g.launch_name, g.launch_end_ts,
          g.ts + g.dur / 2 AS mid, i.host_utid,
          IFNULL(
            (SELECT lt.utid FROM slice AS ls JOIN thread_track AS lt ON lt.id = ls.track_id
             WHERE ls.id = k.launch_id), i.host_utid) AS call_utid,
          g.launch_source = 'graph_replay' AND g.launch_end_ts < g.ts AS first_node,
          LOWER(g.next_kernel) GLOB '*nccl*' OR LOWER(g.next_kernel) GLOB '*rccl*' AS collective,
          (
            SELECT e.id FROM _tt_event_calls AS e
            WHERE e.rank = g.rank AND e.kind = 'wait'
              AND e.utid = IFNULL(
                (SELECT lt.utid FROM slice AS ls JOIN thread_track AS lt ON lt.id = ls.track_id
                 WHERE ls.id = k.launch_id), i.host_utid)
              AND e.ts >= IFNULL(i.prev_launch_ts, g.ts) AND e.ts <= g.launch_ts
            ORDER BY e.ts DESC
            LIMIT 1
          ) AS wait_id
        FROM $gaps AS g
        JOIN tt_gpu_idle AS i ON i.id = g.id
        JOIN tt_kernels AS k ON k.id = i.next_kernel_id
        WHERE g.gap_class = 'gpu_queued'
      ) AS u
      LEFT JOIN _tt_event_calls AS c ON c.id = u.wait_id
    ) AS x
  ) AS v
  ),
  -- The slices open at each gap's middle on the launching thread and on the thread of the next
  -- kernel's launch call.
  _open_frames AS MATERIALIZED (
    SELECT * FROM _tt_slices_open_at!((SELECT gap_id AS key, host_utid AS utid, mid AS at FROM _waits))
  ),
  _open_calls AS MATERIALIZED (
    SELECT * FROM _tt_slices_open_at!((SELECT gap_id AS key, call_utid AS utid, mid AS at FROM _waits))
  ),
  _victims AS MATERIALIZED (
    SELECT
      w.gap_id, w.wait_call, w.wait_detail, w.wait_ts,
      (
        SELECT o.name FROM _open_frames AS o
        WHERE o.key = w.gap_id
          AND o.name GLOB '* (*:*)' AND NOT _tt_is_library_frame!(o.name)
        ORDER BY o.depth DESC
        LIMIT 1
      ) AS victim_frame,
      (
        SELECT o.name FROM _open_calls AS o
        WHERE o.key = w.gap_id
        ORDER BY o.depth DESC
        LIMIT 1
      ) AS victim_call
    FROM _waits AS w
  )
  SELECT
    *,
    'gpu_wait: ' || IFNULL(wait_call || ', ', '') || wait_detail
      || IFNULL(', the host meanwhile in ' || tt_frame_function(victim_frame)
                || IFNULL(' (' || victim_call || ')', ''), '') AS label
  FROM _victims
);
