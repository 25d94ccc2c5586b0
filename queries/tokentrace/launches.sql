-- tokentrace.launches: for every kernel, when the host launched it and how tokentrace knows.
--
-- A kernel's launch is looked up on the rank's launching threads (`tt_launch_threads`: the
-- thread with the most launch evidence, `tt_ranks.host_main_utid`, and any other thread with
-- Triton launcher or replay calls) among the host calls that can enqueue GPU work, by kind
-- (torch calls on the launching thread only: they are a guess, and any thread makes them):
--   * `triton_launch`: a Triton kernel (bare `@triton.jit` name) is launched by one launcher C
--     call each (`cuda_utils.launch` under triton >= 3.9, `__triton_launcher.launch` before):
--     the latest such call that began at least `_tt_min_launch_latency_ns()` before the kernel
--     started. Kernels run in launch order and start within tens of µs of an idle GPU's launch,
--     so the latest earlier call is the kernel's own (off by one call at most when the host
--     launched the next kernel within that latency).
--   * `graph_replay`: a kernel replayed from a CUDA graph (Proton call stack `<captured_at>`)
--     belongs to a `CUDAGraph.replay` call (`torch._C.replay`): the latest one before it.
--   * `proton_scope`: the Proton CPU scope at the source of the kernel's `launch->kernel` flow;
--     the launch happened inside it (`launch_ts` .. `launch_end_ts`), so this is a window.
--   * `runtime_call`: the CUDA runtime or driver call (`cudaLaunchKernel`, `cuLaunchKernelEx`,
--     `hipLaunchKernel`, `cudaMemcpyAsync` ...) at the source of the kernel's `ac2g` flow in a
--     torch-profiler trace (the merge draws one from the call with the kernel's correlation id):
--     exact, it wins over every other source. A kernel whose call is a graph launch
--     (`cudaGraphLaunch`, `hipGraphLaunch`) belongs to that replay (`graph` kind, source
--     `graph_replay`).
--   * `host_call`: any other kernel (cuBLAS, cuDNN, torch's own kernels): the latest torch call
--     (`torch.*`, `Tensor.*` C calls, not the ones that wait for the GPU) that began before it,
--     when it has no Proton scope. An estimate: torch ops launch 0..n kernels each, and some
--     launching ops (indexing, operators such as `@`) are not calls VizTracer logs.
-- A Triton launcher or replay call is only taken inside the kernel's Proton scope (when it has
-- one), and a torch call only when there is no scope: otherwise the scope is the evidence.
-- Kernels with neither have no launch (NULL source).
-- Times in ns.

INCLUDE PERFETTO MODULE tokentrace.kernels;

-- The least time from the start of a launch call to its kernel's start, ns: a call that began
-- later cannot have launched the kernel.
CREATE PERFETTO FUNCTION _tt_min_launch_latency_ns()
RETURNS LONG AS
SELECT 1000;

-- Host calls that can enqueue GPU work, on each rank's launching threads.
CREATE PERFETTO TABLE tt_launch_calls(
  -- Rank tag.
  rank STRING,
  -- The call's slice.
  id JOINID(slice.id),
  -- Its thread.
  utid JOINID(thread.id),
  -- Call start, ns.
  ts TIMESTAMP,
  -- Call duration, ns.
  dur DURATION,
  -- The kernels it launches: `triton`, `graph` or `torch` (see `_tt_kernel_kinds`).
  kind STRING,
  -- The call's name.
  name STRING
) AS
WITH
  -- The candidate calls by name, one simple name filter each (the slice table applies it to
  -- its distinct names, not to every slice in SQL); the four filters match disjoint names.
  _named AS (
    SELECT id, ts, dur, track_id, name FROM slice
    WHERE name IN ('cuda_utils.launch', '__triton_launcher.launch', 'torch._C.replay')
    UNION ALL
    SELECT id, ts, dur, track_id, name FROM slice WHERE name GLOB 'CUDAGraph.replay*'
    UNION ALL
    -- these wait for the GPU (`sync`), they do not launch (and the replay is taken above)
    SELECT id, ts, dur, track_id, name FROM slice
    WHERE name GLOB 'torch.*' AND name NOT IN ('torch._C.replay', 'torch._C._cuda_synchronize')
    UNION ALL
    SELECT id, ts, dur, track_id, name FROM slice
    WHERE name GLOB 'Tensor.*' AND name NOT IN ('Tensor.item', 'Tensor.cpu', 'Tensor.tolist')
  )
SELECT rank, id, utid, ts, dur, kind, name
FROM (
  SELECT
    l.rank, s.id, l.utid, s.ts, s.dur, l.is_primary,
    CASE
      WHEN s.name IN ('cuda_utils.launch', '__triton_launcher.launch') THEN 'triton'
      WHEN s.name = 'torch._C.replay' OR s.name GLOB 'CUDAGraph.replay*' THEN 'graph'
      ELSE 'torch'
    END AS kind,
    s.name
  FROM _named AS s
  JOIN thread_track AS tt ON s.track_id = tt.id
  JOIN tt_launch_threads AS l ON l.utid = tt.utid
  WHERE s.dur >= 0
)
WHERE is_primary OR kind != 'torch'
-- (calls that start together: in slice order)
ORDER BY rank, ts, id;

-- Each rank's launching thread's traced span: where VizTracer saw the host at all.
CREATE PERFETTO TABLE tt_host_windows(
  -- Rank tag.
  rank STRING,
  -- First host slice start on the launching thread, ns.
  ts TIMESTAMP,
  -- Last host slice end on it, ns.
  end_ts TIMESTAMP
) AS
SELECT r.rank, MIN(s.ts) AS ts, MAX(s.ts + s.dur) AS end_ts
FROM (
  -- The outermost slices: the first slice is one, and a finished slice encloses every slice nested
  -- in it (Perfetto drops a complete event that overlaps its parent's end). A filter on depth is
  -- applied by the slice table itself (its index), where a join would read every slice.
  SELECT ts, dur, track_id FROM slice WHERE depth = 0
  UNION ALL
  -- The children of each unfinished slice (dur -1): they may end after it, and each of them
  -- encloses its own descendants unless it is unfinished too (then its children are here as
  -- well). Looked up by parent per unfinished slice: reading every slice of their tracks took
  -- seconds on a host trace of 10^6 slices whose main thread left a few slices open.
  SELECT c.ts, c.dur, c.track_id
  FROM (SELECT id FROM slice WHERE dur < 0) AS u
  CROSS JOIN slice AS c ON c.parent_id = u.id
) AS s
JOIN thread_track AS tt ON s.track_id = tt.id
JOIN tt_ranks AS r ON r.host_main_utid = tt.utid
GROUP BY r.rank
ORDER BY r.rank;

-- Every kernel with what launches it: `graph` (replayed from a CUDA graph: Proton's
-- `<captured_at>` stack, or a torch-profiler graph launch: `cudaGraphLaunch`, `cuGraphLaunch`,
-- `hipGraphLaunch`), `torch` (C++ mangled names and the vendor libraries' families), else
-- `triton` (the bare name of a @triton.jit function).
-- Inline: a PerfettoSQL function call per kernel costs seconds.
CREATE PERFETTO TABLE _tt_kernel_kinds AS
SELECT
  k.id, k.rank, k.ts, k.dur, k.name, k.launch_id,
  CASE
    WHEN EXTRACT_ARG(s.arg_set_id, 'args.call_stack[1]') = '<captured_at>'
      OR l.name IN ('cudaGraphLaunch', 'cuGraphLaunch', 'hipGraphLaunch') THEN 'graph'
    WHEN k.name GLOB '_Z*' OR k.name GLOB '<*' OR k.name GLOB 'void *' OR k.name GLOB 'nvjet*'
      OR k.name GLOB 'sm[0-9]*' OR k.name GLOB 'ampere_*' OR k.name GLOB 'hopper_*'
      OR k.name GLOB 'volta_*' OR k.name GLOB 'turing_*' OR k.name GLOB 'cutlass*'
      OR k.name GLOB '*cublas*' OR k.name GLOB 'cudnn*' OR k.name GLOB 'nccl*'
      OR k.name GLOB '*gemm*' OR k.name GLOB '*gemv*' OR k.name GLOB '*splitK*' THEN 'torch'
    ELSE 'triton'
  END AS kind
FROM tt_kernels AS k
JOIN slice AS s USING (id)
LEFT JOIN slice AS l ON l.id = k.launch_id
ORDER BY k.id;

-- For every kernel, the latest launch call of its kind that began at least the minimal launch
-- latency before it started: one ordered pass per rank and kind, no per-kernel search. Slice ids
-- grow with start time (Perfetto imports in time order), so the largest call id seen so far is the
-- latest call (of a Python frame and its own C call, the C call). The ordered pass carries ids
-- alone, the kernel's and the call's columns are looked up by id after it (a pass carrying every
-- column moves them through the sort).
CREATE PERFETTO TABLE _tt_latest_launch_call AS
WITH
  _events AS (
    SELECT rank, kind, ts AS at, id AS call_id, NULL AS kernel_id
    FROM tt_launch_calls
    UNION ALL
    SELECT rank, kind, ts - _tt_min_launch_latency_ns() AS at, NULL, id
    FROM _tt_kernel_kinds
  ),
  _latest AS (
    SELECT
      kernel_id,
      MAX(call_id) OVER (
        PARTITION BY rank, kind ORDER BY at, call_id IS NULL ROWS UNBOUNDED PRECEDING
      ) AS latest_call_id
    FROM _events
  )
SELECT
  l.kernel_id, k.rank, k.ts, k.dur, k.name, k.launch_id, k.kind,
  c.id AS call_id, c.ts AS call_ts, c.ts + c.dur AS call_end, c.name AS call_name,
  tt.utid AS call_utid
FROM _latest AS l
JOIN _tt_kernel_kinds AS k ON k.id = l.kernel_id
LEFT JOIN slice AS c ON c.id = l.latest_call_id
LEFT JOIN thread_track AS tt ON tt.id = c.track_id;

-- Every kernel with its launch: when it began and ended on the host and where that comes from.
CREATE PERFETTO TABLE tt_kernel_launches(
  -- The kernel slice (see `tt_kernels`).
  id JOINID(slice.id),
  -- Rank tag.
  rank STRING,
  -- Kernel start, ns.
  ts TIMESTAMP,
  -- Kernel duration, ns.
  dur DURATION,
  -- Kernel name.
  name STRING,
  -- `graph`, `triton` or `torch` (see `_tt_kernel_kinds`).
  kind STRING,
  -- Start of the launch (host call, runtime call or Proton scope), ns; NULL without a launch.
  launch_ts TIMESTAMP,
  -- End of the launching call or scope, ns: the launch happened in [launch_ts, launch_end_ts].
  launch_end_ts TIMESTAMP,
  -- `runtime_call`, `triton_launch`, `graph_replay`, `proton_scope`, `host_call`, or NULL.
  launch_source STRING,
  -- Name of the launching call or scope.
  launch_name STRING,
  -- The host thread the launch is judged on: the thread of the launching call, else (a Proton scope
  -- or a CUDA runtime call, whose thread is the profiler's, or no launch) the rank's launching
  -- thread. (Never NULL where the rank has one: this engine stores a column of mostly NULLs
  -- sparsely, and each read of it by id then searches.)
  launch_utid JOINID(thread.id)
) AS
WITH
  _both AS (
    SELECT
      c.kernel_id AS id, c.rank, c.ts, c.dur, c.name, c.kind, c.call_ts, c.call_end, c.call_name,
      c.call_utid,
      sc.ts AS scope_ts, sc.ts + sc.dur AS scope_end, sc.name AS scope_name,
      IFNULL(sc.category IN ('cuda_runtime', 'cuda_driver'), 0) AS runtime_call,
      -- A Triton launcher or replay call is the launch, inside the kernel's Proton scope when
      -- it has one; a torch call is only a guess (ops VizTracer does not log launch too), so a
      -- Proton scope, which certainly holds the launch, wins over it; a runtime call is exact.
      c.call_ts IS NOT NULL AND IFNULL(sc.category NOT IN ('cuda_runtime', 'cuda_driver'), 1)
        AND IIF(c.kind = 'torch', sc.id IS NULL, sc.id IS NULL OR c.call_ts >= sc.ts) AS call_ok
    FROM _tt_latest_launch_call AS c
    LEFT JOIN slice AS sc ON sc.id = c.launch_id
  )
SELECT
  b.id, b.rank, b.ts, b.dur, b.name, b.kind,
  IIF(b.call_ok, b.call_ts, b.scope_ts) AS launch_ts,
  IIF(b.call_ok, b.call_end, b.scope_end) AS launch_end_ts,
  CASE
    WHEN b.runtime_call AND b.kind = 'graph' THEN 'graph_replay'
    WHEN b.runtime_call THEN 'runtime_call'
    WHEN b.call_ok AND b.kind = 'triton' THEN 'triton_launch'
    WHEN b.call_ok AND b.kind = 'graph' THEN 'graph_replay'
    WHEN b.scope_ts IS NOT NULL THEN 'proton_scope'
    WHEN b.call_ok THEN 'host_call'
  END AS launch_source,
  IIF(b.call_ok, b.call_name, b.scope_name) AS launch_name,
  IFNULL(IIF(b.call_ok, b.call_utid, NULL), r.host_main_utid) AS launch_utid
FROM _both AS b
JOIN tt_ranks AS r USING (rank)
ORDER BY b.rank, b.ts, b.id;
