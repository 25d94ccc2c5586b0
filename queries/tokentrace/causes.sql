-- tokentrace.causes: why the host was late, for each host-caused GPU gap.
--
-- Read from the VizTracer timeline of every thread of the rank's host process. A gap's cause
-- kind, first rule that applies:
--   * `gc`: a `gc.collect` C call on the launching thread covers at least a fifth of the gap, or
--     automatic collections that VizTracer logged (`log_gc`, `tokentrace.gc_pauses`) do: the frame
--     open on the launching thread when the longest began is named, the call `gc (automatic)`.
--   * `no_work`: the launching thread waited for work: a wait that hands work over (a queue
--     get, a condition or event wait, a selector: `tt_is_work_wait`) covers at least a fifth of
--     the gap. The engine was starved, not slow: the gap is idle the host could not have filled.
--     Where another thread of the process was not waiting for work itself then, that thread,
--     its frame and its call are named (what the producer of work was doing); else the wait.
--   * `blocking`: a call that sleeps or waits (`time.sleep`, lock acquires, selects, socket and
--     file reads, queue and event waits) covers at least a fifth of the gap.
--   * `gil`: another C call on the launching thread covers at least a fifth of the gap, and it
--     returned at most `_tt_gil_handoff_ns()` after a C call of *another* thread of the process
--     that overlapped the gap ended: the launching thread was ready but waited for the GIL,
--     held by that thread. The other thread, its frame and its call are named. Also `gil`
--     when that call ran at least `_tt_gil_stretch()` times longer than most calls of its name
--     on the thread, while another thread ran Python (not inside a wait) for at least
--     `_tt_gil_python_share()` of it: C code such as `json.dumps`' encoder shows no C call of
--     its own, so the holder is that thread and the frame owning its time there (the standard
--     library's frames count for their caller).
--   * `sync`: a call that waits for the GPU (`Tensor.item`, `.cpu`, `.tolist`, synchronize, event
--     waits) on the launching thread began before the gap and returned as the GPU went idle
--     (within `_tt_drain_window_ns()` after the gap start, or before it when only GPU memory
--     copies ran in between): it drained the pipeline, and the gap is the host's serial catch-up
--     after it; the sync's call site is blamed for the whole gap. Unless the host then spent
--     at least half of the gap in one piece of work that is not the sync's own callers (a C
--     call, or a Python frame that is no ancestor of the sync, with its callees: a function
--     made of many short calls is one piece of work): that work is what kept the GPU idle, and
--     the gap is `busy` there (a loop that calls `.cpu()` and then detokenizes for 5 ms), named
--     as `busy` names it (the frame with the most self time, or that piece of work when the
--     frame with the most self time is one of the sync's callers); the loop's own catch-up
--     after the sync, the launch of the next kernel included (a CUDA-graph replay call), stays
--     `sync`.
--     The three kinds above come first: a synchronous loop drains the pipeline every step, and
--     what the host then did (a sleep, a collection) is what kept the GPU idle.
--   * `busy`: code ran on the launching thread: a C call covering at least half of the gap (named
--     in `cause_call`, e.g. cuDNN planning inside `scaled_dot_product_attention`), else the
--     Python frame with the most self time in the gap (C calls count for their caller, and so
--     does the standard library's code: its frames count for the nearest caller outside it).
--   * `unknown`: no host frame of the launching thread overlaps the gap.
-- Only C calls of at least `_tt_min_cause_call_ns()` are looked at. The causes of the
-- host-caused GPU idle intervals of at least `tt_default_min_gap_ns()` (`tokentrace.stalls`)
-- are computed once, when the module is included (`_tt_cached_gap_causes`), and shared by the
-- queries: `tt_gap_causes!` reads a gap that is one of them from there. Times in ns.

INCLUDE PERFETTO MODULE intervals.intersect;
INCLUDE PERFETTO MODULE tokentrace.gaps;
INCLUDE PERFETTO MODULE tokentrace.gc_pauses;
INCLUDE PERFETTO MODULE tokentrace.kernels;
INCLUDE PERFETTO MODULE tokentrace.stalls;

-- How soon after the GPU went idle a GPU wait must return to have drained the pipeline, ns.
CREATE PERFETTO FUNCTION _tt_drain_window_ns()
RETURNS LONG AS
SELECT 500000;

-- Where GPU memory operations end, per rank (torch-profiler traces record them; Proton does not).
-- The `.item()` of a sync ends with its own device-to-host copy, and the host's first commands
-- after it are often copies too: a gap that begins as one ends, right after a sync returned, is
-- still the catch-up after the drain.
CREATE PERFETTO TABLE _tt_memory_op_ends AS
SELECT DISTINCT rank, ts + dur AS end_ts
FROM tt_kernels
WHERE category IN ('gpu_memcpy', 'gpu_memset');

-- How soon after another thread's C call ended the launching thread's call must return for a
-- GIL hand-off, ns (a thread waiting for the GIL takes it within a switch interval, 5 ms at
-- most, and at once when the holder's C call returns and releases it).
CREATE PERFETTO FUNCTION _tt_gil_handoff_ns()
RETURNS LONG AS
SELECT 1000000;

-- How many times longer than most calls of its name a launching thread's C call must run to
-- have waited for the GIL (a `Tensor.zero_` of microseconds taking milliseconds).
CREATE PERFETTO FUNCTION _tt_gil_stretch()
RETURNS LONG AS
SELECT 10;

-- The share of such a call another thread must spend running Python (in frames, not in a
-- wait) to be the GIL's holder.
CREATE PERFETTO FUNCTION _tt_gil_python_share()
RETURNS DOUBLE AS
SELECT 0.8;

-- Shortest C call considered as a cause, ns.
CREATE PERFETTO FUNCTION _tt_min_cause_call_ns()
RETURNS LONG AS
SELECT 20000;

-- The kind of wait a C call is, by its VizTracer name: `sync`, `gc`, `blocking` or NULL.
CREATE PERFETTO FUNCTION tt_call_wait_kind(
  -- The C call's name (`time.sleep`, `Tensor.item`, `_thread.lock.acquire` ...).
  name STRING
)
-- `sync`, `gc`, `blocking`, or NULL for a call that runs code.
RETURNS STRING AS
SELECT CASE
  WHEN $name IN ('Tensor.item', 'Tensor.cpu', 'Tensor.tolist', 'torch._C._cuda_synchronize')
    OR $name GLOB '*Event*.synchronize' OR $name GLOB '*Stream*.synchronize'
    OR $name GLOB '*.wait_event' OR $name GLOB '*Event*.wait' THEN 'sync'
  WHEN $name = 'gc.collect' THEN 'gc'
  WHEN $name GLOB '*sleep*' OR $name GLOB '*.acquire' OR $name GLOB '*.wait'
    OR $name GLOB '*.wait_for'
    OR $name GLOB 'select.*' OR $name GLOB '*.select' OR $name GLOB '*.poll'
      OR $name GLOB '*.epoll*'
    OR $name GLOB '*.recv*' OR $name GLOB '*.read' OR $name GLOB '*.readinto'
      OR $name GLOB '*.readline'
    OR $name GLOB '*.accept' OR $name GLOB '*.connect' OR $name GLOB 'socket.*'
    OR $name GLOB '_queue.*.get' OR $name GLOB 'posix.read' OR $name GLOB 'posix.wait*'
    OR $name GLOB '*.join' AND $name NOT IN ('str.join', 'bytes.join',
      'bytearray.join') THEN 'blocking'
END;

-- Whether an interval [ts, ts + dur] holds the instant `at` (NULL `at`: no).
CREATE PERFETTO MACRO _tt_holds(
  -- Interval start.
  ts Expr,
  -- Interval duration.
  dur Expr,
  -- The instant.
  at Expr
)
RETURNS Expr AS
IFNULL($ts <= $at AND $at <= $ts + $dur, 0);

-- Whether a blocking call is a wait for work handed over by another thread: the C call of a
-- queue get, a condition or event wait, or a selector, or a lock acquire made by
-- `Condition.wait`, `Event.wait` or `Queue.get` (the standard library's waits for a notify).
CREATE PERFETTO FUNCTION tt_is_work_wait(
  -- The C call's name.
  name STRING,
  -- The Python frame that called it (`func (file:line)`), NULL when none.
  caller STRING
)
-- 1 for a wait for work.
RETURNS BOOL AS
SELECT $name GLOB '_queue.*.get' OR $name GLOB 'select.*' OR $name GLOB '*.epoll*'
  OR $name GLOB '*Selector.select' OR (
    $name GLOB '*.acquire' AND $caller IS NOT NULL AND (
      $caller GLOB 'Condition.wait*' OR $caller GLOB 'Event.wait*' OR $caller GLOB 'Queue.get*'
      OR $caller GLOB 'wait (*threading.py*' OR $caller GLOB 'get (*queue.py*'));

-- C calls of at least the minimum length on every thread of each rank's host process, with the
-- Python frame that called them.
CREATE PERFETTO TABLE tt_host_c_calls(
  -- Rank tag.
  rank STRING,
  -- The call's slice.
  id JOINID(slice.id),
  -- Its thread.
  utid JOINID(thread.id),
  -- Thread name (`MainThread`, `detokenizer` ...).
  thread_name STRING,
  -- 1 on the rank's launching thread.
  is_main BOOL,
  -- Start, ns.
  ts TIMESTAMP,
  -- Duration, ns.
  dur DURATION,
  -- Stack depth.
  depth LONG,
  -- The call's name.
  name STRING,
  -- `sync`, `gc`, `blocking` or NULL (`tt_call_wait_kind`).
  wait_kind STRING,
  -- The Python frame that called it (`func (file:line)`), NULL when none.
  caller STRING
) AS
SELECT
  r.rank, s.id, t.utid, t.name AS thread_name, t.utid = r.host_main_utid AS is_main,
  s.ts, s.dur, s.depth, s.name, tt_call_wait_kind(s.name) AS wait_kind,
  CASE
    WHEN p.name GLOB '* (*:*)' THEN p.name
    WHEN gp.name GLOB '* (*:*)' THEN gp.name
  END AS caller
FROM tt_ranks AS r
JOIN thread AS t ON t.upid = r.host_upid
JOIN thread_track AS tt ON tt.utid = t.utid
JOIN slice AS s ON s.track_id = tt.id
LEFT JOIN slice AS p ON p.id = s.parent_id
LEFT JOIN slice AS gp ON gp.id = p.parent_id
WHERE s.dur >= _tt_min_cause_call_ns() AND s.name NOT GLOB '* (*:*)'
ORDER BY r.rank, s.ts;

-- The frame a standard-library host frame's time counts for in a cause: its nearest Python caller
-- outside the standard library (at most four callers up; the last one looked at when all four are
-- the standard library's, or the outermost when the chain ends). Every other frame counts for
-- itself and has no row. Per frame once, not per gap and frame; the callers are looked up by id for
-- the standard library's frames alone (most frames are not, and need no lookup). The test:
-- `_tt_is_stdlib!`.
CREATE PERFETTO TABLE _tt_frame_owners AS
SELECT
  f0.id,
  CASE
    WHEN f1.id IS NULL OR NOT _tt_is_stdlib!(f1.name) THEN IFNULL(f1.id, f0.id)
    WHEN f2.id IS NULL OR NOT _tt_is_stdlib!(f2.name) THEN IFNULL(f2.id, f1.id)
    WHEN f3.id IS NULL OR NOT _tt_is_stdlib!(f3.name) THEN IFNULL(f3.id, f2.id)
    ELSE IFNULL(f4.id, f3.id)
  END AS owner_id
FROM tt_host_frames AS f0
LEFT JOIN tt_host_frames AS f1 ON f1.id = f0.py_parent_id
LEFT JOIN tt_host_frames AS f2 ON f2.id = f1.py_parent_id
LEFT JOIN tt_host_frames AS f3 ON f3.id = f2.py_parent_id
LEFT JOIN tt_host_frames AS f4 ON f4.id = f3.py_parent_id
WHERE _tt_is_stdlib!(f0.name)
ORDER BY f0.id;

-- The rules of `tt_gap_causes!`, one macro each, over the gaps judged (`_tt_cause_gaps!`) and the
-- calls that cover most of each (`_tt_cause_best_calls!`); `_tt_gap_causes_computed!` picks the
-- first rule that applies (the order of the module's header).

-- The gaps judged: those with `by_host` = 1, each with the thread it is judged on
-- (`tt_gpu_idle.host_utid`, else the rank's launching thread) and its next kernel's launch start.
CREATE PERFETTO MACRO _tt_cause_gaps(
  -- Gaps: columns `id`, `rank`, `ts`, `dur`, `by_host`.
  gaps TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  SELECT g.id, g.rank, g.ts, g.dur, IFNULL(i.host_utid, r.host_main_utid) AS utid, i.launch_ts
  FROM $gaps AS g
  JOIN tt_ranks AS r USING (rank)
  LEFT JOIN tt_gpu_idle AS i ON i.id = g.id
  WHERE g.by_host = 1
);

-- Per gap and wait kind (NULL: a running call), the C call of the gap's thread that covers most
-- of it: the `tt_host_c_calls` columns with `gap_id`, `overlap`, `gap_ts`, `gap_dur`.
CREATE PERFETTO MACRO _tt_cause_best_calls(
  -- The judged gaps (`_tt_cause_gaps!`).
  g TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  WITH
    _main_calls AS (
      SELECT * FROM tt_host_c_calls WHERE utid IN (SELECT DISTINCT utid FROM $g)
    ),
    _main_depths AS (SELECT DISTINCT utid, depth FROM _main_calls),
    _gap_depths AS (
      SELECT g.id, g.utid, g.ts, g.dur, d.depth FROM $g AS g JOIN _main_depths AS d USING (utid)
    ),
    -- The C calls of each gap's thread overlapping it, with their overlap.
    _hits AS MATERIALIZED (
      SELECT ii.id_0 AS gap_id, ii.id_1 AS call_id, ii.dur AS overlap
      FROM _interval_intersect!((_gap_depths, _main_calls), (utid, depth)) AS ii
    ),
    _call_hits AS (
      SELECT h.gap_id, h.overlap, c.*, g.ts AS gap_ts, g.dur AS gap_dur
      FROM _hits AS h
      JOIN tt_host_c_calls AS c ON c.id = h.call_id
      JOIN $g AS g ON g.id = h.gap_id
    )
  SELECT * FROM (
    SELECT
      *,
      ROW_NUMBER() OVER (
        PARTITION BY gap_id, IFNULL(wait_kind, 'run') ORDER BY overlap DESC, ts
      ) AS pos
    FROM _call_hits
  )
  WHERE pos = 1
);

-- Rule `sync`: per gap, the GPU wait of its thread that began before the gap and returned as the
-- GPU went idle (`gap_id`, `call_id`, `name`, `caller`). Its end lies within a drain window of
-- the gap start: syncs and gaps are matched by window-long time bucket (this one or a
-- neighbour), an equality join, not every sync against every gap.
CREATE PERFETTO MACRO _tt_cause_drains(
  -- The judged gaps (`_tt_cause_gaps!`).
  g TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  WITH
    _syncs AS MATERIALIZED (
      SELECT id, rank, utid, ts, ts + dur AS end_ts, name, caller,
        (ts + dur) / _tt_drain_window_ns() AS bucket
      FROM tt_host_c_calls
      WHERE utid IN (SELECT DISTINCT utid FROM $g) AND wait_kind = 'sync'
    ),
    _g_buckets AS MATERIALIZED (
      SELECT g.id, g.rank, g.utid, g.ts, g.dur, g.ts / _tt_drain_window_ns() + n.step AS bucket
      FROM $g AS g
      CROSS JOIN (SELECT -1 AS step UNION ALL SELECT 0 UNION ALL SELECT 1) AS n
    )
  SELECT * FROM (
    SELECT
      g.id AS gap_id, c.id AS call_id, c.name, c.caller,
      ROW_NUMBER() OVER (PARTITION BY g.id ORDER BY c.end_ts DESC) AS pos
    FROM _g_buckets AS g
    JOIN _syncs AS c
      ON c.utid = g.utid AND c.bucket = g.bucket AND c.ts < g.ts
      AND c.end_ts >= g.ts - _tt_drain_window_ns()
      AND c.end_ts <= g.ts + MIN(g.dur, _tt_drain_window_ns())
    WHERE c.end_ts >= g.ts OR EXISTS (
      SELECT 1 FROM _tt_memory_op_ends AS m WHERE m.rank = g.rank AND m.end_ts = g.ts)
  )
  WHERE pos = 1
);

-- Rule `gil`, the hand-off: a running C call of the gap's thread that returned right after
-- another thread's C call that overlapped the gap ended. Per gap the other call (the longest):
-- `gap_id`, `thread_name`, `name`, `caller`, `overlap`. Calls are matched by hand-off-long time
-- bucket of the two ends, as the drains are.
CREATE PERFETTO MACRO _tt_cause_gil_handoffs(
  -- The best calls (`_tt_cause_best_calls!`).
  best TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  WITH
    _long_runs AS MATERIALIZED (
      SELECT gap_id, rank, utid, ts + dur AS end_ts, gap_ts, gap_ts + gap_dur AS gap_end
      FROM $best
      WHERE wait_kind IS NULL AND overlap * 5 >= gap_dur
    ),
    _others AS MATERIALIZED (
      SELECT rank, utid, ts, ts + dur AS end_ts, dur, thread_name, name, caller,
        (ts + dur) / _tt_gil_handoff_ns() AS bucket
      FROM tt_host_c_calls
      -- (every thread's running calls: read only when some gap has a long running call, as
      -- none has when every given gap's cause is cached)
      WHERE wait_kind IS NULL AND EXISTS (SELECT 1 FROM _long_runs)
    ),
    _run_buckets AS MATERIALIZED (
      SELECT b.*, b.end_ts / _tt_gil_handoff_ns() + n.step AS bucket
      FROM _long_runs AS b
      CROSS JOIN (SELECT -1 AS step UNION ALL SELECT 0 UNION ALL SELECT 1) AS n
    )
  SELECT * FROM (
    SELECT
      b.gap_id, o.thread_name, o.name, o.caller,
      MIN(o.end_ts, b.gap_end) - MAX(o.ts, b.gap_ts) AS overlap,
      ROW_NUMBER() OVER (PARTITION BY b.gap_id ORDER BY o.dur DESC) AS pos
    FROM _run_buckets AS b
    JOIN _others AS o
      ON o.rank = b.rank AND o.utid != b.utid AND o.bucket = b.bucket AND o.end_ts <= b.end_ts
      AND o.end_ts >= b.end_ts - _tt_gil_handoff_ns()
      AND o.ts < b.gap_end AND o.end_ts > b.gap_ts
  )
  WHERE pos = 1
);

-- Rule `busy`, Python: per gap the frame with the most self time in it (`gap_id`, `frame_id`,
-- `frame`, `self_ns`), the standard library's frames (json, queue, threading ...) counting for
-- the nearest caller outside it (`_tt_frame_owners`), as C calls count for their Python caller:
-- `detokenize_responses` owns the time of its `json.dumps`.
CREATE PERFETTO MACRO _tt_cause_top_frames(
  -- The gaps' frames (`tt_gap_frames!` of the judged gaps).
  gap_frames TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  WITH
    -- (host frames only: a parent that never ended has a row in the gap frames, and no owner;
    -- CROSS JOIN: the frames are looked up by id, where a plain JOIN let the planner scan
    -- `tt_host_frames`)
    _owned AS (
      SELECT gf.gap_id, gf.self_ns, gf.total_ns, IFNULL(o.owner_id, gf.frame_id) AS owner_id
      FROM $gap_frames AS gf
      CROSS JOIN tt_host_frames AS hf ON hf.id = gf.frame_id
      LEFT JOIN _tt_frame_owners AS o ON o.id = gf.frame_id
    ),
    -- Per gap and owner its time; the gap's top owner is among those with the most self time
    -- (ranked among those only, not among every frame of the gap).
    _owner_times AS MATERIALIZED (
      SELECT gap_id, owner_id, SUM(self_ns) AS self_ns, MAX(total_ns) AS total_ns
      FROM _owned
      GROUP BY gap_id, owner_id
    ),
    _top_self AS MATERIALIZED (
      SELECT gap_id, MAX(self_ns) AS self_ns FROM _owner_times GROUP BY gap_id
    )
  SELECT * FROM (
    SELECT
      o.gap_id, o.owner_id AS frame_id, s.name AS frame, o.self_ns,
      ROW_NUMBER() OVER (
        PARTITION BY o.gap_id ORDER BY o.self_ns DESC, o.total_ns DESC, s.name
      ) AS frame_rank
    FROM _owner_times AS o
    JOIN _top_self AS t ON t.gap_id = o.gap_id AND t.self_ns = o.self_ns
    -- CROSS JOIN: the frames are looked up by id (a plain JOIN let the planner scan `slice`)
    CROSS JOIN slice AS s ON s.id = o.owner_id
  )
  WHERE frame_rank = 1
);

-- Rule `no_work`: the gaps whose thread waited for work (`gap_id`, `rank`, `utid`, `gap_ts`,
-- `gap_end`): a blocking wait that hands work over covers at least a fifth of the gap.
CREATE PERFETTO MACRO _tt_cause_work_waits(
  -- The best calls (`_tt_cause_best_calls!`).
  best TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  SELECT gap_id, rank, utid, gap_ts, gap_ts + gap_dur AS gap_end
  FROM $best
  WHERE wait_kind = 'blocking' AND overlap * 5 >= gap_dur AND tt_is_work_wait(name, caller)
);

-- What the other threads not waiting for work themselves did while the gap's thread waited for
-- work: per gap the thread with the longest C call in the gap (the producer of work, or what
-- kept it from producing): `gap_id`, `thread_name`, `name`, `caller`.
CREATE PERFETTO MACRO _tt_cause_producers(
  -- The gaps that waited for work (`_tt_cause_work_waits!`).
  starved TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  SELECT * FROM (
    SELECT
      w.gap_id, c.thread_name, c.name, c.caller,
      ROW_NUMBER() OVER (
        PARTITION BY w.gap_id
        ORDER BY MIN(c.ts + c.dur, w.gap_end) - MAX(c.ts, w.gap_ts) DESC, c.ts
      ) AS pos
    FROM $starved AS w
    JOIN tt_host_c_calls AS c
      ON c.rank = w.rank AND c.utid != w.utid AND c.ts < w.gap_end AND c.ts + c.dur > w.gap_ts
      AND NOT tt_is_work_wait(c.name, c.caller)
  )
  WHERE pos = 1
);

-- Rule `gil`, Python: the gap thread's long running call stretched far past its name's usual
-- length (`_tt_gil_stretch()` times the median of its calls on that thread): `gap_id`, `rank`,
-- `launcher_utid` and the call's part of the gap, [`w_ts`, `w_end`].
CREATE PERFETTO MACRO _tt_cause_stretched_calls(
  -- The best calls (`_tt_cause_best_calls!`).
  best TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  WITH
    _long_running AS MATERIALIZED (
      SELECT gap_id, rank, utid, name, dur, MAX(ts, gap_ts) AS w_ts,
        MIN(ts + dur, gap_ts + gap_dur) AS w_end
      FROM $best
      WHERE wait_kind IS NULL AND overlap * 5 >= gap_dur
    ),
    -- One pass over the calls of those names.
    _name_calls AS MATERIALIZED (
      SELECT tt.utid, s.name, s.dur,
        ROW_NUMBER() OVER (PARTITION BY tt.utid, s.name ORDER BY s.dur) AS pos,
        COUNT(*) OVER (PARTITION BY tt.utid, s.name) AS calls
      -- (CROSS JOIN: the slice table is asked for one name at a time, which it answers from its
      -- names, where an IN list read every slice)
      FROM (SELECT DISTINCT utid, name FROM _long_running) AS n
      CROSS JOIN slice AS s ON s.name = n.name
      JOIN thread_track AS tt ON s.track_id = tt.id AND tt.utid = n.utid
    ),
    _usual AS (
      SELECT utid, name, dur AS median_dur FROM _name_calls WHERE pos = (calls + 1) / 2
    )
  SELECT l.gap_id, l.rank, l.utid AS launcher_utid, l.w_ts, l.w_end
  FROM _long_running AS l
  JOIN _usual AS u USING (utid, name)
  WHERE l.dur >= _tt_gil_stretch() * u.median_dur
);

-- Per stretched call, the other threads of the process that mostly did not wait meanwhile:
-- `gap_id`, `utid`, `thread_name`, `w_ts`, `w_end`, and `free_ns`, the call's time less the
-- thread's waits in it (the intersection with its waits, per thread).
CREATE PERFETTO MACRO _tt_cause_free_threads(
  -- The stretched calls (`_tt_cause_stretched_calls!`).
  stretched TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  WITH
    _other_threads AS MATERIALIZED (
      SELECT
        ROW_NUMBER() OVER (ORDER BY w.gap_id, t.utid) AS id,
        w.gap_id, w.w_ts AS ts, w.w_end - w.w_ts AS dur, w.w_ts, w.w_end, t.utid,
        t.name AS thread_name
      FROM $stretched AS w
      JOIN tt_ranks AS r USING (rank)
      JOIN thread AS t ON t.upid = r.host_upid AND t.utid != w.launcher_utid
    ),
    _other_waits AS (
      SELECT id, ts, dur, utid FROM tt_host_c_calls
      WHERE wait_kind IN ('blocking', 'sync')
        AND EXISTS (SELECT 1 FROM _other_threads)
    ),
    _waited AS MATERIALIZED (
      SELECT ii.id_0 AS id, SUM(ii.dur) AS wait_ns
      FROM _interval_intersect!((_other_threads, _other_waits), (utid)) AS ii
      GROUP BY ii.id_0
    )
  SELECT o.gap_id, o.utid, o.thread_name, o.w_ts, o.w_end,
    o.dur - IFNULL(w.wait_ns, 0) AS free_ns
  FROM _other_threads AS o
  LEFT JOIN _waited AS w USING (id)
);

-- The GIL's holder among the free threads: one that spent at least `_tt_gil_python_share()` of
-- the call in Python (inside one of its outermost frames), and its frame: its deepest
-- application frame (not the standard library's) that overlaps at least half of the call, and
-- the C call under it, if any. Per gap: `gap_id`, `thread_name`, `overlap`, `caller`.
CREATE PERFETTO MACRO _tt_cause_python_holders(
  -- The free threads (`_tt_cause_free_threads!`).
  free TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  WITH
    _python_holders AS (
      SELECT * FROM (
        SELECT
          n.gap_id, n.utid, n.thread_name, n.w_ts, n.w_end,
          MIN(n.free_ns, IFNULL((
            SELECT SUM(MIN(s.ts + s.dur, n.w_end) - MAX(s.ts, n.w_ts))
            FROM thread_track AS tt JOIN slice AS s ON s.track_id = tt.id
            WHERE tt.utid = n.utid AND s.depth = 0 AND s.ts < n.w_end AND s.ts + s.dur > n.w_ts
          ), 0)) AS python_ns
        FROM $free AS n
        WHERE n.free_ns >= _tt_gil_python_share() * (n.w_end - n.w_ts)
      )
      WHERE python_ns >= _tt_gil_python_share() * (w_end - w_ts)
    )
  SELECT * FROM (
    SELECT
      h.gap_id, h.thread_name, h.python_ns AS overlap, s.name AS caller,
      ROW_NUMBER() OVER (
        PARTITION BY h.gap_id ORDER BY h.python_ns DESC, s.depth DESC, s.ts
      ) AS pos
    FROM _python_holders AS h
    JOIN thread_track AS tt ON tt.utid = h.utid
    JOIN slice AS s ON s.track_id = tt.id
    WHERE s.ts < h.w_end AND s.ts + s.dur > h.w_ts AND s.name GLOB '* (*:*)'
      AND NOT _tt_is_stdlib!(s.name)
      AND (MIN(s.ts + s.dur, h.w_end) - MAX(s.ts, h.w_ts)) * 2 >= h.w_end - h.w_ts
  )
  WHERE pos = 1
);

-- The cause columns of `tt_gap_causes!` from the rule each gap's cause came from: the thread
-- (the holder's for `gil`, the producer's for `no_work`, else the gap's own), the frame and its
-- function, the C call, and the part of the gap it explains (`busy`: the C call when it covers at
-- least half of the gap, else the frame with the most self time).
CREATE PERFETTO MACRO _tt_cause_named(
  -- Per gap its `kind` and every rule's call, caller, time and thread (`_picked` of
  -- `_tt_gap_causes_computed!`).
  picked TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  SELECT
    p.gap_id,
    p.kind AS cause_kind,
    CASE p.kind
      WHEN 'gil' THEN p.gl_thread WHEN 'unknown' THEN NULL
      WHEN 'no_work' THEN IFNULL(p.pr_thread, m.name) ELSE m.name
    END AS cause_thread,
    tt_frame_function(CASE p.kind
      WHEN 'sync' THEN p.d_caller WHEN 'gc' THEN p.gc_caller WHEN 'blocking' THEN p.bl_caller
      WHEN 'no_work' THEN IFNULL(p.pr_caller, p.bl_caller)
      WHEN 'gil' THEN p.gl_caller
      WHEN 'busy' THEN IIF(p.ru_ns * 2 >= p.dur, IFNULL(p.ru_caller, p.f_frame), p.f_frame)
    END) AS cause_function,
    CASE p.kind
      WHEN 'sync' THEN p.d_caller WHEN 'gc' THEN p.gc_caller WHEN 'blocking' THEN p.bl_caller
      WHEN 'no_work' THEN IFNULL(p.pr_caller, p.bl_caller)
      WHEN 'gil' THEN p.gl_caller
      WHEN 'busy' THEN IIF(p.ru_ns * 2 >= p.dur, IFNULL(p.ru_caller, p.f_frame), p.f_frame)
    END AS cause_frame,
    CASE p.kind
      WHEN 'sync' THEN p.d_call WHEN 'gc' THEN p.gc_call WHEN 'blocking' THEN p.bl_call
      WHEN 'no_work' THEN IIF(p.pr_caller IS NOT NULL, p.pr_call, p.bl_call)
      WHEN 'gil' THEN p.gl_call WHEN 'busy' THEN IIF(p.ru_ns * 2 >= p.dur, p.ru_call, NULL)
    END AS cause_call,
    CASE p.kind
      WHEN 'sync' THEN p.dur WHEN 'gc' THEN p.gc_ns WHEN 'blocking' THEN p.bl_ns
      WHEN 'no_work' THEN p.bl_ns
      WHEN 'gil' THEN p.gl_ns
      WHEN 'busy' THEN IIF(p.ru_ns * 2 >= p.dur, p.ru_ns, p.f_ns)
    END AS cause_ns
  FROM $picked AS p
  LEFT JOIN thread AS m ON m.utid = p.utid
);

-- `tt_gap_causes!` computed: the cause of each given gap from the host's calls and frames. Each
-- rule's rows by gap (the macros above); the first rule that applies, in the order of the
-- module's header, is the gap's cause kind (`_tt_cause_named!`, above, names it).
CREATE PERFETTO MACRO _tt_gap_causes_computed(
  -- Gaps: columns `id`, `rank`, `ts`, `dur`, `by_host`; non-overlapping per rank.
  gaps TableOrSubquery,
  -- Their host frames (`tt_gap_frames!`' rows for them, at least columns `gap_id`, `frame_id`,
  -- `self_ns`, `total_ns`). The caller knows where they lie (cached or not): asking
  -- `tt_gap_frames!` here would nest one macro more, and the engine's parser refuses nesting
  -- past a fixed depth.
  gap_frames TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  WITH
    _g AS MATERIALIZED (SELECT * FROM _tt_cause_gaps!($gaps)),
    _best AS MATERIALIZED (SELECT * FROM _tt_cause_best_calls!(_g)),
    _starved AS MATERIALIZED (SELECT * FROM _tt_cause_work_waits!(_best)),
    _gap_frames AS MATERIALIZED (
      SELECT f.gap_id, f.frame_id, f.self_ns, f.total_ns FROM $gap_frames AS f
    ),
    _stretched AS MATERIALIZED (SELECT * FROM _tt_cause_stretched_calls!(_best)),
    _free AS MATERIALIZED (SELECT * FROM _tt_cause_free_threads!(_stretched)),
    _drains AS MATERIALIZED (SELECT * FROM _tt_cause_drains!(_g)),
    -- Per drained gap, the largest piece of Python work after the sync (a frame with its
    -- callees) over half of the gap that is none of the sync's callers and does not launch.
    _work AS MATERIALIZED (
      SELECT * FROM (
        SELECT
          f.gap_id, f.frame_id, s.name AS frame, f.total_ns,
          ROW_NUMBER() OVER (PARTITION BY f.gap_id ORDER BY f.total_ns DESC, s.depth) AS pos
        FROM _drains AS d
        JOIN _g AS g ON g.id = d.gap_id
        JOIN _gap_frames AS f ON f.gap_id = d.gap_id
        CROSS JOIN slice AS s ON s.id = f.frame_id
        WHERE f.total_ns * 2 >= g.dur AND NOT _tt_holds!(s.ts, s.dur, g.launch_ts)
          AND f.frame_id NOT IN (SELECT a.id FROM ancestor_slice(d.call_id) AS a)
      )
      WHERE pos = 1
    ),
    _picked AS (
      SELECT
        g.id AS gap_id, g.utid,
        CASE
          WHEN gc.overlap * 5 >= g.dur OR ag.overlap * 5 >= g.dur THEN 'gc'
          WHEN sv.gap_id IS NOT NULL THEN 'no_work'
          WHEN bl.overlap * 5 >= g.dur THEN 'blocking'
          WHEN gl.gap_id IS NOT NULL OR pg.gap_id IS NOT NULL THEN 'gil'
          WHEN d.gap_id IS NOT NULL AND NOT (
            (IFNULL(ru.overlap, 0) * 2 >= g.dur AND NOT _tt_holds!(ru.ts, ru.dur, g.launch_ts))
            OR w.gap_id IS NOT NULL
          ) THEN 'sync'
          WHEN ru.overlap * 2 >= g.dur OR f.gap_id IS NOT NULL THEN 'busy'
          ELSE 'unknown'
        END AS kind,
        g.dur, d.name AS d_call, d.caller AS d_caller,
        -- an explicit gc.collect, else an automatic collection VizTracer logged (`log_gc`)
        IIF(gc.overlap * 5 >= g.dur, gc.name, 'gc (automatic)') AS gc_call,
        IIF(gc.overlap * 5 >= g.dur, gc.caller, ag.caller) AS gc_caller,
        IIF(gc.overlap * 5 >= g.dur, gc.overlap, ag.overlap) AS gc_ns,
        bl.name AS bl_call, bl.caller AS bl_caller, bl.overlap AS bl_ns,
        IIF(gl.gap_id IS NOT NULL, gl.name, NULL) AS gl_call,
        IIF(gl.gap_id IS NOT NULL, gl.caller, pg.caller) AS gl_caller,
        IIF(gl.gap_id IS NOT NULL, gl.overlap, pg.overlap) AS gl_ns,
        IIF(gl.gap_id IS NOT NULL, gl.thread_name, pg.thread_name) AS gl_thread,
        pr.thread_name AS pr_thread, pr.name AS pr_call, pr.caller AS pr_caller,
        ru.name AS ru_call, ru.caller AS ru_caller, ru.overlap AS ru_ns,
        -- (after a drain, the frame with the most self time unless it is one of the sync's
        -- callers or the launch's: then the piece of work that made the gap `busy`)
        IIF(w.gap_id IS NOT NULL AND (_tt_holds!(fs.ts, fs.dur, g.launch_ts)
              OR f.frame_id IN (SELECT a.id FROM ancestor_slice(d.call_id) AS a)),
            w.frame, f.frame) AS f_frame,
        IIF(w.gap_id IS NOT NULL AND (_tt_holds!(fs.ts, fs.dur, g.launch_ts)
              OR f.frame_id IN (SELECT a.id FROM ancestor_slice(d.call_id) AS a)),
            w.total_ns, f.self_ns) AS f_ns
      FROM _g AS g
      LEFT JOIN _drains AS d ON d.gap_id = g.id
      LEFT JOIN _work AS w ON w.gap_id = g.id
      LEFT JOIN _best AS gc ON gc.gap_id = g.id AND gc.wait_kind = 'gc'
      LEFT JOIN _tt_cause_gc_pauses!(_g) AS ag ON ag.gap_id = g.id
      LEFT JOIN _best AS bl ON bl.gap_id = g.id AND bl.wait_kind = 'blocking'
      LEFT JOIN _tt_cause_gil_handoffs!(_best) AS gl ON gl.gap_id = g.id
      LEFT JOIN _tt_cause_python_holders!(_free) AS pg ON pg.gap_id = g.id
      LEFT JOIN _starved AS sv ON sv.gap_id = g.id
      LEFT JOIN _tt_cause_producers!(_starved) AS pr ON pr.gap_id = g.id
      LEFT JOIN _best AS ru ON ru.gap_id = g.id AND ru.wait_kind IS NULL
      LEFT JOIN _tt_cause_top_frames!(_gap_frames) AS f ON f.gap_id = g.id
      LEFT JOIN slice AS fs ON fs.id = f.frame_id
    )
  SELECT * FROM _tt_cause_named!(_picked)
);

-- The host-caused (`host_late`) GPU idle intervals (`tt_gpu_idle`) of at least
-- `tt_default_min_gap_ns()` (the default shortest gap of every query that reads causes): their
-- causes are computed once, when the module is included, and shared by those queries. Whether
-- a gap is `host_late` does not depend on `launch_overhead_ns` (see `tt_gap_class`).
CREATE PERFETTO TABLE _tt_cached_cause_gaps AS
SELECT id, rank, ts, dur, 1 AS by_host
FROM tt_gpu_idle
WHERE dur >= tt_default_min_gap_ns()
  AND tt_gap_class(ts, dur, launch_ts, launch_end_ts, launch_source, 0, in_replay) = 'host_late'
ORDER BY id;

-- Their causes (`_tt_gap_causes_computed!`), by gap.
CREATE PERFETTO TABLE _tt_cached_gap_causes AS
SELECT gap_id, cause_kind, cause_thread, cause_function, cause_frame, cause_call, cause_ns
FROM _tt_gap_causes_computed!(
  _tt_cached_cause_gaps,
  -- (their frames are all cached: they are GPU idle intervals of at least the same length)
  (SELECT * FROM _tt_cached_source!(_tt_cached_cause_gaps))
)
ORDER BY gap_id;

-- The cause of each gap with by_host = 1. Columns: `gap_id`, `cause_kind`, `cause_thread`,
-- `cause_function`, `cause_frame` (`func (file:line)`), `cause_call` (the C call, NULL for busy
-- Python), `cause_ns` (the part of the gap the cause explains).
-- A gap that is a row of `_tt_cached_cause_gaps` (same id, rank, ts and dur) reads its cause
-- from `_tt_cached_gap_causes`; any other is computed here. (A gap's cause depends on its rank,
-- ts and dur alone.)
CREATE PERFETTO MACRO tt_gap_causes(
  -- Gaps: columns `id`, `rank`, `ts`, `dur`, `by_host`; non-overlapping per rank.
  gaps TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  WITH
    _in AS MATERIALIZED (SELECT id, rank, ts, dur, by_host FROM $gaps WHERE by_host = 1),
    _cached AS MATERIALIZED (
      SELECT i.id
      FROM _in AS i
      JOIN _tt_cached_cause_gaps AS c
        ON c.id = i.id AND c.rank = i.rank AND c.ts = i.ts AND c.dur = i.dur
    ),
    -- (a CTE, not a subquery argument: see `_tt_cached_source!`)
    _uncached AS (SELECT * FROM _in WHERE id NOT IN (SELECT id FROM _cached))
  SELECT
    c.gap_id, c.cause_kind, c.cause_thread, c.cause_function, c.cause_frame, c.cause_call,
    c.cause_ns
  FROM _cached AS k
  JOIN _tt_cached_gap_causes AS c ON c.gap_id = k.id
  UNION ALL
  -- (no gap of `_uncached` has cached frames: the frame cache holds the GPU idle intervals of at
  -- least the same length as the cause cache, and every host-caused one has its cause cached)
  SELECT * FROM _tt_gap_causes_computed!(_uncached, _tt_gap_frames_computed!(_uncached))
);
