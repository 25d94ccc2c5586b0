-- tokentrace.stalls: what the launching host thread was doing during each GPU gap.
--
-- For a set of gaps (non-overlapping per rank), every Python frame of the host thread the gap is
-- judged on (`tt_gpu_idle.host_utid`: the thread that launched the kernel after it, else the
-- rank's launching thread; frames of `tokentrace.host_frames`) that overlaps it gets two figures:
-- * `total_ns`: overlap of the gap with the frame's whole interval (inclusive: the roll-up to
--   the callers, so an outer loop frame covers the whole gap);
-- * `self_ns`: overlap of the gap with the frame's flattened ("leaf") time, i.e. the instants at
--   which it is the deepest Python frame (C calls such as `time.sleep` count for their caller).
--   Computed as total_ns minus the total_ns of its Python children in the same gap (children
--   nest inside their parent, so this is exact; a parent always overlaps the gap too).
-- Frames of one thread at one stack depth never overlap, so the overlaps come from
-- `intervals.intersect` partitioned by thread and depth. The frames of the GPU idle intervals of
-- at least `tt_default_min_gap_ns()` (100 µs, every query's default shortest gap) are
-- intersected once, when the module is included (`_tt_cached_gap_frames`), and shared by the
-- queries: `tt_gap_frames!` reads a gap that is one of them from there. Times in ns.

INCLUDE PERFETTO MODULE intervals.intersect;
INCLUDE PERFETTO MODULE tokentrace.gaps;
INCLUDE PERFETTO MODULE tokentrace.host_frames;

-- Stack depths used by each launching thread's host frames (GROUP BY: this engine plans it as one
-- sorted pass, DISTINCT as a hash of every row).
CREATE PERFETTO TABLE _tt_host_frame_depths AS
SELECT utid, depth FROM tt_host_frames GROUP BY utid, depth ORDER BY utid, depth;

-- The thread each gap is judged on, by the gap's id (`tt_gpu_idle.id`: every gap set is a
-- subset of it).
CREATE PERFETTO INDEX _tt_gpu_idle_by_id ON tt_gpu_idle(id);

-- `tt_gap_frames!` computed: the frames of each given gap from the intersection itself.
CREATE PERFETTO MACRO _tt_gap_frames_computed(
  -- Gaps: columns `id` (of `tt_gpu_idle`), `rank`, `ts`, `dur`; non-overlapping per rank.
  gaps TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  WITH
    _gap_depths AS (
      SELECT u.id, u.ts, u.dur, u.rank, u.utid, d.depth
      FROM (
        SELECT g.id, g.ts, g.dur, g.rank, IFNULL(i.host_utid, r.host_main_utid) AS utid
        FROM $gaps AS g
        JOIN tt_ranks AS r USING (rank)
        LEFT JOIN tt_gpu_idle AS i ON i.id = g.id
      ) AS u
      JOIN _tt_host_frame_depths AS d USING (utid)
    ),
    -- (no gaps: no frames, so that an empty gap set does not read every frame)
    _frames_in AS (SELECT * FROM tt_host_frames WHERE EXISTS (SELECT 1 FROM _gap_depths)),
    _hits AS MATERIALIZED (
      SELECT
        ii.id_0 AS gap_id, ii.id_1 AS frame_id, ii.dur AS total_ns,
        -- the frame's rank, the gap's (the intersection's own partition column is not read: its
        -- strings do not survive materialisation in this engine) and whether its Python parent is a
        -- host frame too: it is not when the parent never ended (a call VizTracer wrote as a begin
        -- without an end), which then overlaps no gap itself. Looked up per hit by id: a table of
        -- every frame with its parent's would copy every frame, most of which overlap no gap.
        f.rank, f.name, f.depth, f.py_parent_id, p.id IS NOT NULL AS parent_is_frame
      FROM _interval_intersect!((_gap_depths, _frames_in), (utid, depth)) AS ii
      JOIN tt_host_frames AS f ON f.id = ii.id_1
      LEFT JOIN tt_host_frames AS p ON p.id = f.py_parent_id
    ),
    -- A frame's self time is its own overlap minus its Python children's: the children's
    -- overlaps summed per gap and parent (each frame is one hit per gap at most).
    _children AS MATERIALIZED (
      SELECT gap_id, py_parent_id AS frame_id, SUM(total_ns) AS child_ns
      FROM _hits
      WHERE py_parent_id IS NOT NULL
      GROUP BY gap_id, py_parent_id
    )
  SELECT
    h.gap_id, h.frame_id, h.name AS frame, h.depth, h.total_ns - IFNULL(c.child_ns, 0) AS self_ns,
    h.total_ns, h.rank
  FROM _hits AS h
  LEFT JOIN _children AS c ON c.gap_id = h.gap_id AND c.frame_id = h.frame_id
  UNION ALL
  -- A parent that is no host frame (never ended) is in no hit; it still gets its row, with no
  -- overlap of its own and minus its children's. (CROSS JOIN: the parents are looked up by id;
  -- a plain JOIN let the planner scan all of `slice`.)
  SELECT o.gap_id, o.frame_id, s.name AS frame, s.depth, o.self_ns, 0 AS total_ns, o.rank
  FROM (
    SELECT gap_id, py_parent_id AS frame_id, -SUM(total_ns) AS self_ns, rank
    FROM _hits
    WHERE py_parent_id IS NOT NULL AND NOT parent_is_frame
    GROUP BY gap_id, py_parent_id, rank
  ) AS o
  CROSS JOIN slice AS s ON s.id = o.frame_id
);

-- The GPU idle intervals (`tt_gpu_idle`) of at least `tt_default_min_gap_ns()`, the default
-- shortest gap of every runnable query that reads frames: their frames are computed once, when
-- the module is included, so that the report's queries, each with its own subset of these gaps,
-- share one intersection.
CREATE PERFETTO TABLE _tt_cached_frame_gaps AS
SELECT id, rank, ts, dur
FROM tt_gpu_idle
WHERE dur >= tt_default_min_gap_ns()
ORDER BY id;

-- Their frames (`_tt_gap_frames_computed!`), by gap.
CREATE PERFETTO TABLE _tt_cached_gap_frames AS
SELECT gap_id, frame_id, frame, depth, self_ns, total_ns, rank
FROM _tt_gap_frames_computed!(_tt_cached_frame_gaps)
ORDER BY gap_id;

-- The ids of the gaps of `$gaps` whose frames `_tt_cached_gap_frames` holds: the rows of
-- `_tt_cached_frame_gaps` (same id, rank, ts and dur).
CREATE PERFETTO MACRO _tt_cached_gap_ids(
  -- Gaps: columns `id`, `rank`, `ts`, `dur`.
  gaps TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  SELECT g.id
  FROM $gaps AS g
  JOIN _tt_cached_frame_gaps AS c ON c.id = g.id AND c.rank = g.rank AND c.ts = g.ts
    AND c.dur = g.dur
);

-- The cached frames of the gaps in `cached` (ids, `_tt_cached_gap_ids!`), in `tt_gap_frames!`'
-- columns, read where they lie (a semi-join: `_tt_cached_gap_frames` is scanned in its order,
-- gap_id, and the ids probed). `+gap_id` keeps the test in SQLite: handed to the table as an IN
-- constraint it costs time in the product of the ids and the rows; probed here it is one pass.
-- The macros below take the other gaps' frames from `_tt_gap_frames_computed!` over a CTE of
-- those gaps: a CTE, not a subquery argument, keeps the expanded SQL shallow, and the engine's
-- parser refuses nesting past a fixed depth.
CREATE PERFETTO MACRO _tt_cached_source(
  -- The cached gaps' ids (a CTE name).
  cached TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  SELECT gap_id, frame_id, frame, depth, self_ns, total_ns, rank
  FROM _tt_cached_gap_frames
  WHERE +gap_id IN (SELECT id FROM $cached)
);

-- Host frames overlapping each gap, with their self and total overlap.
-- Columns: `gap_id` (the gap's `id`), `frame_id` (a `tt_host_frames` row), `frame` (full
-- VizTracer name), `depth`, `self_ns`, `total_ns`, `rank` (the gap's and the frame's: no join
-- back to the gaps needed for it). Frames with total_ns = 0 are left out (but for a Python
-- parent that never ended: it overlaps nothing itself, its row has total_ns 0).
-- A gap that is a row of `tt_gpu_idle` (same id, rank, ts and dur) of at least
-- `tt_default_min_gap_ns()` reads its frames from `_tt_cached_gap_frames`; any other is
-- intersected here. (A gap's frames depend on its rank, ts and dur alone.)
CREATE PERFETTO MACRO tt_gap_frames(
  -- Gaps: columns `id`, `rank`, `ts`, `dur`; non-overlapping per rank.
  gaps TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  WITH
    _in AS MATERIALIZED (SELECT id, rank, ts, dur FROM $gaps),
    _cached AS MATERIALIZED (SELECT * FROM _tt_cached_gap_ids!(_in)),
    _uncached AS (SELECT * FROM _in WHERE id NOT IN (SELECT id FROM _cached))
  SELECT * FROM _tt_cached_source!(_cached)
  UNION ALL
  SELECT * FROM _tt_gap_frames_computed!(_uncached)
);

-- `tt_gap_frames!` summed per rank and frame: the figures of the report's profiles. Each source of
-- frames (`_tt_cached_gap_frames`, the intersection for any other gap) is summed on its own and the
-- few sums are added up: summing the rows of `tt_gap_frames!` would copy every one of them first. A
-- gap's frames all come from one source, so the counts add up exactly. Columns: `rank`, `frame`
-- (full VizTracer name), `gaps` (the gaps it overlaps), `self_ns`, `total_ns`.
CREATE PERFETTO MACRO tt_gap_frame_sums(
  -- Gaps: columns `id`, `rank`, `ts`, `dur`; non-overlapping per rank.
  gaps TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  WITH
    _in AS MATERIALIZED (SELECT id, rank, ts, dur FROM $gaps),
    _cached AS MATERIALIZED (SELECT * FROM _tt_cached_gap_ids!(_in)),
    _uncached AS (SELECT * FROM _in WHERE id NOT IN (SELECT id FROM _cached)),
    _sums AS (
      SELECT
        f.rank, f.frame,
        COUNT(DISTINCT f.gap_id) AS gaps, SUM(f.self_ns) AS self_ns, SUM(f.total_ns) AS total_ns
      FROM _tt_cached_source!(_cached) AS f
      GROUP BY f.rank, f.frame
      UNION ALL
      SELECT
        f.rank, f.frame,
        COUNT(DISTINCT f.gap_id) AS gaps, SUM(f.self_ns) AS self_ns, SUM(f.total_ns) AS total_ns
      FROM _tt_gap_frames_computed!(_uncached) AS f
      GROUP BY f.rank, f.frame
    )
  SELECT rank, frame, SUM(gaps) AS gaps, SUM(self_ns) AS self_ns, SUM(total_ns) AS total_ns
  FROM _sums
  GROUP BY rank, frame
);

-- A frame's rank in its gap, over rows of `tt_gap_frames!`: 1 = the most self time (ties: more
-- total time, then frame name, then depth).
CREATE PERFETTO MACRO _tt_frame_rank()
RETURNS Expr AS
ROW_NUMBER() OVER (PARTITION BY gap_id ORDER BY self_ns DESC, total_ns DESC, frame, depth);

-- `tt_gap_frames!` with each frame's rank in its gap: `frame_rank` 1 = the most self time
-- (ties: more total time, then frame name, then depth).
CREATE PERFETTO MACRO tt_ranked_gap_frames(
  -- Gaps: columns `id`, `rank`, `ts`, `dur`; non-overlapping per rank.
  gaps TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  SELECT
    f.*,
    _tt_frame_rank!() AS frame_rank
  FROM tt_gap_frames!($gaps) AS f
);

-- The rows of `tt_ranked_gap_frames!` with frame_rank <= `top`, ranked in each source of frames (as
-- `tt_gap_frame_sums!`), not over a copy of `tt_gap_frames!`'s rows. A gap's frames all come from
-- one source, so each frame gets the same rank.
CREATE PERFETTO MACRO tt_top_gap_frames(
  -- Gaps: columns `id`, `rank`, `ts`, `dur`; non-overlapping per rank.
  gaps TableOrSubquery,
  -- The most frames kept per gap (an expression).
  top Expr
)
RETURNS TableOrSubquery AS
(
  WITH
    _in AS MATERIALIZED (SELECT id, rank, ts, dur FROM $gaps),
    _cached AS MATERIALIZED (SELECT * FROM _tt_cached_gap_ids!(_in)),
    _uncached AS (SELECT * FROM _in WHERE id NOT IN (SELECT id FROM _cached))
  SELECT * FROM (SELECT f.*, _tt_frame_rank!() AS frame_rank FROM _tt_cached_source!(_cached) AS f)
  WHERE frame_rank <= $top
  UNION ALL
  SELECT * FROM (
    SELECT f.*, _tt_frame_rank!() AS frame_rank FROM _tt_gap_frames_computed!(_uncached) AS f
  )
  WHERE frame_rank <= $top
);
