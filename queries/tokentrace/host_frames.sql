-- tokentrace.host_frames: the Python frames of each rank's launching host thread, flattened.
--
-- Host frames are VizTracer slices of the threads that launch kernels (`tt_launch_threads`: the
-- rank's launching thread, and any other thread with Triton launcher or replay calls). VizTracer
-- names a Python frame `func (file:line)`; C calls (`time.sleep`, `builtins.hash`, `torch._C...`,
-- `Tensor.cpu`) have no ` (file:line)` suffix. Only Python frames are kept: a C call's time belongs
-- to the Python frame that called it. Flattened, each instant belongs to the deepest Python frame
-- active then (its "leaf" frame): `host_stall` owns the time of its `time.sleep`,
-- `tokenize_requests` the time of its `builtins.hash` calls. Times in ns.

INCLUDE PERFETTO MODULE tokentrace.ranks;

-- Whether a VizTracer slice name is a Python frame (`func (file:line)`).
CREATE PERFETTO FUNCTION tt_is_python_frame(
  -- Slice name.
  name STRING
)
-- 1 for a Python frame, 0 for a C call or anything else.
RETURNS BOOL AS
SELECT $name GLOB '* (*:*)';

-- Whether a VizTracer frame is the Python standard library's (not an installed package's):
-- `/lib/python3.x/...` outside site- and dist-packages, a frozen module, or a torch-profiler frame
-- the merge marked `<stdlib>/` (Kineto writes paths relative to `sys.path`). Its helpers (json,
-- queue, threading) are nobody's scheduler step and nobody's cause: they count for their caller. As
-- an expression expanded in place, for a statement over every frame (a function call per frame
-- costs seconds); `tt_is_stdlib_frame` is the same test as a function.
CREATE PERFETTO MACRO _tt_is_stdlib(
  -- The frame's name.
  name Expr
)
RETURNS Expr AS
(($name GLOB '* (*/lib/python3*' OR $name GLOB '* (<frozen *' OR $name GLOB '* (<stdlib>/*')
  AND $name NOT GLOB '*-packages/*');

-- `_tt_is_stdlib!` as a function.
CREATE PERFETTO FUNCTION tt_is_stdlib_frame(
  name STRING
)
-- 1 for a standard-library frame.
RETURNS BOOL AS
SELECT _tt_is_stdlib!($name);

-- 1 for a frame of a library below the engine (the scheduler step finder and the victim of a GPU
-- wait skip them), read from the file path in the frame's name
-- (`func (path:line)`; Kineto writes the path from its `sys.path` entry, VizTracer the absolute
-- one, through `site-packages/` or `dist-packages/`): the tensor framework (`torch/`: its
-- `nn.modules` containers, autograd, dynamo; `functorch/`), the compilers and array libraries it
-- calls (`triton/`, `numpy/`), torch's module scopes (`<nn.Module>`), code without a file
-- (`<string>`, `<frozen ...>`) and the standard library. These run once per layer, per op or per
-- call of the engine's own code, never once per scheduler step of their own accord; the engine's
-- own code (vLLM, SGLang, transformers' generation loop, the user's script) stays a candidate,
-- whichever folder it is installed in.
CREATE PERFETTO MACRO _tt_is_library_frame(
  -- The frame's name.
  name Expr
)
RETURNS Expr AS
(
  $name GLOB '* (torch/*' OR $name GLOB '* (*-packages/torch/*'
  OR $name GLOB '* (functorch/*' OR $name GLOB '* (*-packages/functorch/*'
  OR $name GLOB '* (triton/*' OR $name GLOB '* (*-packages/triton/*'
  OR $name GLOB '* (numpy/*' OR $name GLOB '* (*-packages/numpy/*'
  OR $name GLOB '* (<*' OR _tt_is_stdlib!($name)
);

-- The function part of a VizTracer frame name: `host_stall (x.py:105)` -> `host_stall`.
CREATE PERFETTO FUNCTION tt_frame_function(
  -- Frame (slice) name.
  name STRING
)
-- The name without its ` (file:line)` suffix (unchanged when it has none).
RETURNS STRING AS
SELECT IIF(
  tt_is_python_frame($name),
  SUBSTR($name, 1, LENGTH(RTRIM(SUBSTR($name, 1, INSTR($name, ' (') + 0), ' ')) ),
  $name
);

-- Python frames of every rank's launching host threads, with their nearest Python ancestor. One
-- pass over the slices: the parent's name is looked up by id, and the ancestors are walked only for
-- a frame whose parent is a C call (not a table of every frame and its parent's name first, which
-- would copy every frame twice). The slice table filters and yields its rows in id order
-- (`_tt_host_main_tracks`), so no sort follows. (GLOB inline rather than `tt_is_python_frame`: a
-- function call per slice is costly in this engine.)
CREATE PERFETTO TABLE tt_host_frames(
  -- The frame's slice.
  id JOINID(slice.id),
  -- Rank tag.
  rank STRING,
  -- Its thread.
  utid JOINID(thread.id),
  -- Start, ns.
  ts TIMESTAMP,
  -- Duration, ns.
  dur DURATION,
  -- Stack depth on the thread (0 = outermost; C calls counted).
  depth LONG,
  -- Full VizTracer name, `func (file:line)`.
  name STRING,
  -- Nearest enclosing Python frame (NULL for an outermost one).
  py_parent_id JOINID(slice.id)
) AS
SELECT
  s.id, h.rank, h.utid, s.ts, s.dur, s.depth, s.name,
  CASE
    WHEN s.parent_id IS NULL THEN NULL
    WHEN p.name GLOB '* (*:*)' THEN s.parent_id
    ELSE (
      SELECT a.id FROM ancestor_slice(s.id) AS a
      WHERE a.name GLOB '* (*:*)'
      ORDER BY a.depth DESC
      LIMIT 1
    )
  END AS py_parent_id
FROM slice AS s
CROSS JOIN _tt_host_main_tracks AS h ON h.track_id = s.track_id
LEFT JOIN slice AS p ON p.id = s.parent_id
WHERE s.dur > 0 AND s.name GLOB '* (*:*)'
ORDER BY s.id;

-- The slices open at given times on given threads: per row of `points`, every slice of the
-- thread's tracks with `ts <= at <= ts + dur`. On a thread's track slices nest, so each slice
-- open at a time is the one that started last at or before it, or one of that one's parents:
-- the lookup is a search by start and a walk up the parents per point, never a scan of the
-- thread's slices per point (which grows with the square of a long rank).
-- Columns: `key`, `id`, `name`, `depth` (the deepest open slice has the largest).
CREATE PERFETTO MACRO _tt_slices_open_at(
  -- Columns `key` (returned as is), `utid` (the thread), `at` (the time, ns).
  points TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  WITH _last_started AS MATERIALIZED (
    SELECT p.key, p.at, l.id AS leaf_id
    FROM $points AS p
    JOIN thread_track AS t ON t.utid = p.utid
    JOIN slice AS l ON l.track_id = t.id
      AND l.ts = (SELECT MAX(x.ts) FROM slice AS x WHERE x.track_id = t.id AND x.ts <= p.at)
  )
  SELECT o.key, s.id, s.name, s.depth
  FROM _last_started AS o
  JOIN slice AS s ON s.id = o.leaf_id
  WHERE s.ts + s.dur >= o.at
  UNION
  SELECT o.key, a.id, a.name, a.depth
  FROM _last_started AS o
  CROSS JOIN ancestor_slice(o.leaf_id) AS a
  WHERE a.ts + a.dur >= o.at
);
