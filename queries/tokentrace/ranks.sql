-- tokentrace.ranks: which processes and threads belong to which rank.
--
-- A merged trace carries one `tokentrace.rank` instant per rank (category `tokentrace`, on the
-- rank's GPU process) whose args hold the merge record: rank tag, parallel coordinates, the host
-- process, the alignment. A raw, unmerged trace has none: then every process with slices is its
-- own rank, named after the process (`pid <pid>` when unnamed), and is both its host and GPU
-- process. All times and offsets are nanoseconds.

-- The merge record of each rank, read from the `tokentrace.rank` instants.
CREATE PERFETTO TABLE _tt_rank_instants AS
SELECT
  EXTRACT_ARG(s.arg_set_id, 'args.rank') AS rank,
  EXTRACT_ARG(s.arg_set_id, 'args.dp') AS dp,
  EXTRACT_ARG(s.arg_set_id, 'args.pp') AS pp,
  EXTRACT_ARG(s.arg_set_id, 'args.cp') AS cp,
  EXTRACT_ARG(s.arg_set_id, 'args.tp') AS tp,
  EXTRACT_ARG(s.arg_set_id, 'args.dcp') AS dcp,
  EXTRACT_ARG(s.arg_set_id, 'args.ep') AS ep,
  EXTRACT_ARG(s.arg_set_id, 'args.global_rank') AS global_rank,
  IFNULL(EXTRACT_ARG(s.arg_set_id, 'args.stage'), '') AS stage,
  EXTRACT_ARG(s.arg_set_id, 'args.host_pid') AS host_pid,
  EXTRACT_ARG(s.arg_set_id, 'args.host_main_tid') AS host_main_tid,
  t.upid AS gpu_upid,
  EXTRACT_ARG(s.arg_set_id, 'args.align_method') AS align_method,
  EXTRACT_ARG(s.arg_set_id, 'args.offset_ns') AS offset_ns,
  EXTRACT_ARG(s.arg_set_id, 'args.offset_lo_ns') AS offset_lo_ns,
  EXTRACT_ARG(s.arg_set_id, 'args.offset_hi_ns') AS offset_hi_ns,
  EXTRACT_ARG(s.arg_set_id, 'args.anchor_consistent') AS anchor_consistent,
  EXTRACT_ARG(s.arg_set_id, 'args.viz_overflow') AS viz_overflow,
  EXTRACT_ARG(s.arg_set_id, 'args.proton_dialect') AS proton_dialect,
  IFNULL(EXTRACT_ARG(s.arg_set_id, 'args.gpu_format'), 'proton') AS gpu_format,
  EXTRACT_ARG(s.arg_set_id, 'args.proton_kernels') AS proton_kernels,
  EXTRACT_ARG(s.arg_set_id, 'args.proton_flows') AS proton_flows,
  EXTRACT_ARG(s.arg_set_id, 'args.time_origin_unix_ns') AS time_origin_unix_ns
FROM slice AS s
JOIN thread_track AS tt ON s.track_id = tt.id
JOIN thread AS t USING (utid)
WHERE s.name = 'tokentrace.rank' AND s.category = 'tokentrace';

-- Launch evidence of each host thread: the calls it made that enqueue GPU work. `strong`:
-- Triton launcher calls and CUDA-graph replays (each launches for certain); `weak`: torch C
-- calls (`torch.*`, `Tensor.*`, not the ones that only wait for the GPU), most of which launch
-- kernels. The launching thread is never assumed to be the main thread: engines launch from a
-- worker thread (transformers' continuous batching, SGLang's overlap scheduler) while the main
-- thread waits. (One simple name filter per branch: the slice table applies it to its distinct
-- names.)
CREATE PERFETTO TABLE _tt_thread_launch_evidence(
  -- The thread.
  utid JOINID(thread.id),
  -- Its process.
  upid JOINID(process.id),
  -- Triton launcher and CUDA-graph replay calls on it.
  strong LONG,
  -- Other torch C calls on it.
  weak LONG
) AS
WITH
  _calls AS (
    SELECT track_id, 1 AS strong FROM slice
    WHERE name IN ('cuda_utils.launch', '__triton_launcher.launch', 'torch._C.replay')
    UNION ALL
    SELECT track_id, 1 AS strong FROM slice WHERE name GLOB 'CUDAGraph.replay*'
    UNION ALL
    SELECT track_id, 0 AS strong FROM slice
    WHERE name GLOB 'torch.*'
      AND name NOT IN ('torch._C.replay', 'torch._C._cuda_synchronize', 'torch.cuda.synchronize')
    UNION ALL
    SELECT track_id, 0 AS strong FROM slice
    WHERE name GLOB 'Tensor.*' AND name NOT IN ('Tensor.item', 'Tensor.cpu', 'Tensor.tolist')
  )
SELECT tt.utid, t.upid, SUM(c.strong) AS strong, SUM(1 - c.strong) AS weak
FROM _calls AS c
JOIN thread_track AS tt ON c.track_id = tt.id
JOIN thread AS t USING (utid)
WHERE t.upid IS NOT NULL
GROUP BY tt.utid
ORDER BY tt.utid;

-- Processes that hold at least one thread slice (the candidates for a raw trace's ranks).
CREATE PERFETTO TABLE _tt_processes_with_slices AS
SELECT DISTINCT t.upid
FROM thread_track AS tt
JOIN thread AS t USING (utid)
WHERE t.upid IS NOT NULL AND EXISTS (SELECT 1 FROM slice AS s WHERE s.track_id = tt.id);

-- One row per rank. Merged traces: from the `tokentrace.rank` instants. Raw traces: one rank
-- per process with slices (`is_merged` = 0, alignment columns NULL).
CREATE PERFETTO TABLE tt_ranks(
  -- Rank tag, e.g. `TP1`, `DP0-CP1-TP3`, `DP0-PP1-TP2-EP0`, `TP0-DECODE`; the process name for
  -- raw traces.
  rank STRING,
  -- Data-parallel index (NULL when the tag has none).
  dp LONG,
  -- Pipeline-parallel index (NULL when the tag has none).
  pp LONG,
  -- Context-parallel index (NULL when the tag has none).
  cp LONG,
  -- Tensor-parallel index (NULL for raw traces).
  tp LONG,
  -- Decode-context-parallel index, vLLM's `dcp` (NULL when the tag has none).
  dcp LONG,
  -- Expert-parallel index (NULL when the tag has none).
  ep LONG,
  -- vLLM's global worker rank (`rank<r>` of its trace names; NULL for other engines).
  global_rank LONG,
  -- Profiling stage suffix: '', `EXTEND`, `DECODE`, `MIXED`.
  stage STRING,
  -- The rank's host (VizTracer) process.
  host_upid JOINID(process.id),
  -- The rank's GPU (Proton) process.
  gpu_upid JOINID(process.id),
  -- The host thread that launches kernels (NULL when unknown): the host process's thread with
  -- the most launch evidence (`_tt_thread_launch_evidence`: launcher and replay calls first,
  -- then torch calls), else the thread the merge recorded (the torch profiler's thread with the
  -- most CUDA runtime calls, or the main thread when nothing else is known).
  host_main_utid JOINID(thread.id),
  -- How the clocks were aligned: `anchors`, `estimated`, `offset`, or `shared_clock` (a
  -- torch-profiler trace alone: host and GPU on one clock); NULL for raw traces.
  align_method STRING,
  -- Offset added to Proton times, ns.
  offset_ns LONG,
  -- Lower bound of the true offset, ns (NULL when not computed).
  offset_lo_ns LONG,
  -- Upper bound of the true offset, ns (NULL when not computed).
  offset_hi_ns LONG,
  -- 1 when the estimated offset agrees with the anchors, 0 when not, NULL when not checked.
  anchor_consistent LONG,
  -- 1 when VizTracer's ring buffer overflowed (earliest host events lost).
  viz_overflow LONG,
  -- Layout of the GPU input: Proton's `3.9` or `3.8`, or `kineto` (torch profiler).
  proton_dialect STRING,
  -- What recorded the GPU side: `proton` or `kineto` (the torch profiler); NULL for raw traces.
  gpu_format STRING,
  -- Kernels in the Proton input (as counted by the merge).
  proton_kernels LONG,
  -- launch->kernel flows in the Proton input (as counted by the merge).
  proton_flows LONG,
  -- Unix-epoch ns of ts 0 of the trace (NULL without VizTracer anchor).
  time_origin_unix_ns LONG,
  -- 1 for ranks read from a merged trace, 0 for the raw-trace fallback.
  is_merged LONG
) AS
SELECT
  i.rank, i.dp, i.pp, i.cp, i.tp, i.dcp, i.ep, i.global_rank, i.stage,
  (SELECT MIN(p.upid) FROM process AS p WHERE p.pid = i.host_pid) AS host_upid,
  i.gpu_upid,
  IFNULL(
    (
      SELECT e.utid FROM _tt_thread_launch_evidence AS e
      JOIN process AS p USING (upid)
      WHERE p.pid = i.host_pid
      ORDER BY e.strong DESC, e.weak DESC, e.utid
      LIMIT 1
    ),
    (
      SELECT MIN(t.utid) FROM thread AS t
      JOIN process AS p USING (upid)
      WHERE p.pid = i.host_pid AND t.tid = i.host_main_tid
    )
  ) AS host_main_utid,
  i.align_method, i.offset_ns, i.offset_lo_ns, i.offset_hi_ns, i.anchor_consistent,
  i.viz_overflow, i.proton_dialect, i.gpu_format, i.proton_kernels, i.proton_flows,
    i.time_origin_unix_ns,
  1 AS is_merged
FROM _tt_rank_instants AS i
UNION ALL
SELECT
  IFNULL(p.name, 'pid ' || p.pid) AS rank, NULL AS dp, NULL AS pp, NULL AS cp, NULL AS tp,
  NULL AS dcp, NULL AS ep, NULL AS global_rank, '' AS stage,
  p.upid AS host_upid,
  p.upid AS gpu_upid,
  (SELECT MIN(t.utid) FROM thread AS t WHERE t.upid = p.upid AND t.is_main_thread = 1)
    AS host_main_utid,
  NULL AS align_method, NULL AS offset_ns, NULL AS offset_lo_ns, NULL AS offset_hi_ns,
  NULL AS anchor_consistent, NULL AS viz_overflow, NULL AS proton_dialect, NULL AS gpu_format,
  NULL AS proton_kernels, NULL AS proton_flows, NULL AS time_origin_unix_ns,
  0 AS is_merged
FROM _tt_processes_with_slices AS w
JOIN process AS p USING (upid)
WHERE NOT EXISTS (SELECT 1 FROM _tt_rank_instants)
ORDER BY dp, pp, cp, tp, dcp, ep, stage, rank;

-- Each process of a rank and its role: `host`, `gpu`, or `process` (raw traces, both roles).
CREATE PERFETTO TABLE tt_rank_processes(
  -- The process.
  upid JOINID(process.id),
  -- Its rank tag (see `tt_ranks.rank`).
  rank STRING,
  -- `host`, `gpu`, or `process` when one process is both (raw traces).
  role STRING
) AS
SELECT gpu_upid AS upid, rank, IIF(host_upid = gpu_upid, 'process', 'gpu') AS role
FROM tt_ranks
UNION ALL
SELECT host_upid AS upid, rank, 'host' AS role
FROM tt_ranks
WHERE host_upid IS NOT NULL AND host_upid != gpu_upid
ORDER BY rank, role;

-- The threads of each rank that launch kernels: its launching thread (`tt_ranks.host_main_utid`)
-- and every other thread of its host process with a Triton launcher or CUDA-graph replay call
-- (an engine may launch from several threads: SGLang's overlap scheduler runs the forward pass
-- in its own thread). A gap is judged on the thread that launched the kernel after it
-- (`tt_gpu_idle.host_utid`).
CREATE PERFETTO TABLE tt_launch_threads(
  -- Rank tag.
  rank STRING,
  -- The thread.
  utid JOINID(thread.id),
  -- 1 for the rank's launching thread (`tt_ranks.host_main_utid`).
  is_primary BOOL,
  -- Its Triton launcher and CUDA-graph replay calls.
  strong LONG
) AS
SELECT r.rank, r.host_main_utid AS utid, 1 AS is_primary, IFNULL(e.strong, 0) AS strong
FROM tt_ranks AS r
LEFT JOIN _tt_thread_launch_evidence AS e ON e.utid = r.host_main_utid
WHERE r.host_main_utid IS NOT NULL
UNION ALL
SELECT r.rank, e.utid, 0 AS is_primary, e.strong
FROM tt_ranks AS r
JOIN _tt_thread_launch_evidence AS e ON e.upid = r.host_upid
WHERE e.strong > 0 AND e.utid != IFNULL(r.host_main_utid, -1)
ORDER BY rank, utid;

-- The tracks of each rank's launching threads (`tt_launch_threads`). A scan of those threads'
-- slices that must come out in id order reads `slice` first and joins this table to it
-- (`slice CROSS JOIN _tt_host_main_tracks`): the slice table filters and yields its rows in id
-- order, so no sort follows. Without an ORDER BY the other way round is quicker: it reads only
-- those tracks.
CREATE PERFETTO TABLE _tt_host_main_tracks(
  -- Rank tag.
  rank STRING,
  -- The thread.
  utid JOINID(thread.id),
  -- A track of the thread.
  track_id JOINID(track.id)
) AS
SELECT l.rank, l.utid, tt.id AS track_id
FROM tt_launch_threads AS l
JOIN thread_track AS tt ON tt.utid = l.utid
ORDER BY track_id;

-- The stream-capture windows of each rank: from a capture's begin call (`cudaStreamBeginCapture`,
-- `cuStreamBeginCapture`, `hipStreamBeginCapture`, with any suffix) to the end of the first end
-- call on the same thread after it (`*StreamEndCapture*`; without one, the end of the thread's
-- last slice: the trace was cut inside the capture). Kernels launched inside a capture are
-- recorded into a graph, not run: the GPU idles while the host captures, and no such gap is a
-- host stall. A table, not a view: the stall tests read it once per gap, and a view would
-- look for the capture calls among every slice each time (a few ms each).
CREATE PERFETTO TABLE tt_capture_windows(
  -- Rank tag.
  rank STRING,
  -- The capturing thread.
  utid JOINID(thread.id),
  -- Start of the begin call.
  ts TIMESTAMP,
  -- To the end of the end call.
  dur DURATION,
  -- The begin call's name.
  begin_call STRING,
  -- The end call's name (NULL: the trace ends inside the capture).
  end_call STRING
) AS
WITH
  _calls AS (
    SELECT p.rank, t.utid, s.id, s.ts, s.dur, s.name, s.name GLOB '*StreamBeginCapture*' AS is_begin
    FROM slice AS s
    JOIN thread_track AS tt ON s.track_id = tt.id
    JOIN thread AS t USING (utid)
    JOIN tt_rank_processes AS p ON p.upid = t.upid
    WHERE s.name GLOB '*StreamBeginCapture*' OR s.name GLOB '*StreamEndCapture*'
  ),
  _paired AS (
    SELECT
      b.rank, b.utid, b.ts, b.name AS begin_call,
      (SELECT e.id FROM _calls AS e
       WHERE NOT e.is_begin AND e.utid = b.utid AND e.ts >= b.ts
       ORDER BY e.ts LIMIT 1) AS end_id
    FROM _calls AS b
    WHERE b.is_begin
  )
SELECT
  p.rank, p.utid, p.ts,
  IFNULL(e.ts + e.dur, (
    SELECT MAX(s.ts + s.dur) FROM slice AS s
    JOIN thread_track AS tt ON s.track_id = tt.id
    WHERE tt.utid = p.utid
  )) - p.ts AS dur,
  p.begin_call, e.name AS end_call
FROM _paired AS p
LEFT JOIN slice AS e ON e.id = p.end_id
ORDER BY p.rank, p.ts;

-- Each rank's CUDA-graph calls of the CUDA runtime or driver or of HIP, by name (with any
-- suffix): stream-capture begins (`cudaStreamBeginCapture`, `hipStreamBeginCapture`),
-- instantiations (`cudaGraphInstantiate`, `hipGraphInstantiateWithFlags`) and graph launches
-- (`cudaGraphLaunch`, `cuGraphLaunch`, `hipGraphLaunch`). A rank that captures graphs and
-- launches none recorded a graph capture, not a run. Ranks without such calls have no row. A
-- view: lazy.
CREATE PERFETTO VIEW tt_rank_graph_calls(
  -- Rank tag.
  rank STRING,
  -- Stream-capture begin calls.
  capture_calls LONG,
  -- Graph instantiations.
  instantiate_calls LONG,
  -- Graph launches (replays).
  launch_calls LONG
) AS
WITH
  _calls AS (
    SELECT s.track_id, 'capture' AS what FROM slice AS s WHERE s.name GLOB '*StreamBeginCapture*'
    UNION ALL
    SELECT s.track_id, 'instantiate' AS what FROM slice AS s WHERE s.name GLOB '*GraphInstantiate*'
    UNION ALL
    SELECT s.track_id, 'launch' AS what FROM slice AS s WHERE s.name GLOB '*GraphLaunch*'
  )
SELECT
  p.rank,
  SUM(c.what = 'capture') AS capture_calls,
  SUM(c.what = 'instantiate') AS instantiate_calls,
  SUM(c.what = 'launch') AS launch_calls
FROM _calls AS c
JOIN thread_track AS tt ON c.track_id = tt.id
JOIN thread AS t USING (utid)
JOIN tt_rank_processes AS p ON p.upid = t.upid
GROUP BY p.rank
ORDER BY p.rank;
