-- tokentrace.setup: whether an early GPU gap is the host's one-off set-up.
--
-- The first launches after a profiler starts pay one-off costs: lazy CUDA/HIP context, module and
-- library loads, cuBLAS/cuRAND handles, NCCL/RCCL communicators, the compilation of a kernel at
-- its first launch. The host then spends the gap in a call that later runs in microseconds. Such
-- a gap is `startup` (`tokentrace.gaps`), left out of the stall profile; a gap of the same early
-- steps with the host in its ordinary step code is not: it is what every step would pay.
--
-- The evidence is read on the thread the gap is judged on (`tt_gpu_idle.host_utid`), from the
-- slices (VizTracer's Python frames and C calls, the torch profiler's runtime calls and Python
-- events) that cover at least a fifth of the gap:
--   * a set-up call by its name (`_tt_is_setup_call!`): a driver or runtime module/library load
--     or initialisation, a communicator's creation, a compiler's frame;
--   * a first call: the thread's first slice of its name, at least `_tt_first_call_stretch()`
--     times as long as the thread's next slice of that name (an op's first call loading its
--     module, 33 ms, then 10 µs); or its only slice of that name, lasting at most twice the gap
--     (a one-off `torch.randint` of 72 ms over a 74 ms gap: cuRAND's initialisation; an outer
--     loop's frame, also called once, outlasts the gap many times and is no evidence).
-- Where the host shows nothing in the gap (no slice of that thread overlaps it: untraced, or no
-- host timeline), the gap's place among the first kernels is the only evidence and counts.
-- Times in ns.

-- How many times longer than the next call of its name a first call must be to be set-up.
CREATE PERFETTO FUNCTION _tt_first_call_stretch()
RETURNS LONG AS
SELECT 10;

-- Whether a slice's name is a set-up call: a CUDA/HIP driver or runtime initialisation or
-- module/library load, a communicator's initialisation (NCCL, RCCL, torch.distributed), or a
-- frame of a compiler (torch.compile's dynamo and inductor, Triton's compiler).
CREATE PERFETTO MACRO _tt_is_setup_call(
  -- The slice's name.
  name Expr
)
RETURNS Expr AS
(
  $name IN ('cuInit', 'hipInit', 'cudaSetDevice', 'hipSetDevice', 'cuDevicePrimaryCtxRetain',
            'hipDevicePrimaryCtxRetain', 'torch._C._cuda_init')
  OR $name GLOB 'cuModuleLoad*' OR $name GLOB 'cuLibraryLoad*' OR $name GLOB 'hipModuleLoad*'
  OR $name GLOB 'cudaLibraryLoad*' OR $name GLOB 'hipLibraryLoad*'
  OR $name GLOB 'ncclCommInit*' OR $name GLOB 'rcclCommInit*'
  OR $name GLOB '_lazy_init (*torch/cuda/__init__.py:*'
  OR $name GLOB 'init_process_group (*torch/distributed/*'
  OR $name GLOB 'new_group (*torch/distributed/*'
  OR $name GLOB '*compile* (*torch/_dynamo/*' OR $name GLOB '*compile* (*torch/_inductor/*'
  OR $name GLOB '*compile* (*triton/compiler/*'
);

-- Whether the gap [ts, ts + dur) on thread `utid` shows set-up (see the module's header): 1 when
-- a slice of the thread covering at least a fifth of the gap is a set-up call or a first call, or
-- when no slice of the thread overlaps the gap; else 0.
CREATE PERFETTO FUNCTION tt_gap_shows_setup(
  -- The thread the gap is judged on (NULL: no host thread; counts as nothing shown).
  utid JOINID(thread.id),
  -- Gap start.
  ts TIMESTAMP,
  -- Gap length.
  dur DURATION
)
RETURNS BOOL AS
WITH
  _covering AS (
    SELECT s.id, s.track_id, s.ts, s.dur, s.name,
      MIN(s.ts + s.dur, $ts + $dur) - MAX(s.ts, $ts) AS overlap
    FROM thread_track AS t
    JOIN slice AS s ON s.track_id = t.id
    WHERE t.utid = $utid AND s.ts < $ts + $dur AND s.ts + s.dur > $ts
  )
SELECT
  NOT EXISTS (SELECT 1 FROM _covering)
  OR EXISTS (
    SELECT 1 FROM _covering AS c
    WHERE c.overlap * 5 >= $dur
      AND (
        _tt_is_setup_call!(c.name)
        OR (
          NOT EXISTS (
            SELECT 1 FROM slice AS p
            WHERE p.track_id = c.track_id AND p.name = c.name AND p.ts < c.ts
          )
          AND IFNULL((
            SELECT n.dur FROM slice AS n
            WHERE n.track_id = c.track_id AND n.name = c.name AND n.ts > c.ts
            ORDER BY n.ts
            LIMIT 1
          ) * _tt_first_call_stretch() <= c.dur, c.dur <= 2 * $dur)
        )
      )
  );
