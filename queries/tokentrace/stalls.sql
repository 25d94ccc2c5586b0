-- tokentrace.stalls: what the launching host thread was doing during each GPU gap.
--
-- For a set of gaps (non-overlapping per rank), every Python frame of the rank's launching host
-- thread (`tokentrace.host_frames`) that overlaps a gap gets two figures:
-- * `total_ns`: overlap of the gap with the frame's whole interval (inclusive: the roll-up to
--   the callers, so an outer loop frame covers the whole gap);
-- * `self_ns`: overlap of the gap with the frame's flattened ("leaf") time, i.e. the instants at
--   which it is the deepest Python frame (C calls such as `time.sleep` count for their caller).
--   Computed as total_ns minus the total_ns of its Python children in the same gap (children
--   nest inside their parent, so this is exact; a parent always overlaps the gap too).
-- Frames of one thread at one stack depth never overlap, so the overlaps come from
-- `intervals.intersect` partitioned by rank and depth. Times in ns.

INCLUDE PERFETTO MODULE intervals.intersect;
INCLUDE PERFETTO MODULE tokentrace.host_frames;

-- Stack depths used by each rank's host frames.
CREATE PERFETTO TABLE _tt_host_frame_depths AS
SELECT DISTINCT rank, depth FROM tt_host_frames ORDER BY rank, depth;

-- Host frames overlapping each gap, with their self and total overlap.
-- Columns: `gap_id` (the gap's `id`), `frame_id` (a `tt_host_frames` row), `frame` (full
-- VizTracer name), `depth`, `self_ns`, `total_ns`. Frames with total_ns = 0 are left out.
CREATE PERFETTO MACRO tt_gap_frames(
  -- Gaps: columns `id`, `rank`, `ts`, `dur`; non-overlapping per rank.
  gaps TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  WITH
    _gap_depths AS (
      SELECT g.id, g.ts, g.dur, g.rank, d.depth
      FROM $gaps AS g
      JOIN _tt_host_frame_depths AS d USING (rank)
    ),
    _hits AS MATERIALIZED (
      SELECT ii.id_0 AS gap_id, ii.id_1 AS frame_id, ii.dur AS total_ns
      FROM _interval_intersect!((_gap_depths, tt_host_frames), (rank, depth)) AS ii
    ),
    -- A frame's self time is its own overlap minus its Python children's: each hit adds its
    -- overlap to itself and subtracts it from its parent (GROUP BY, no self-join).
    _signed AS (
      SELECT h.gap_id, h.frame_id, h.total_ns, h.total_ns AS self_part
      FROM _hits AS h
      UNION ALL
      SELECT h.gap_id, f.py_parent_id AS frame_id, 0 AS total_ns, -h.total_ns AS self_part
      FROM _hits AS h
      JOIN tt_host_frames AS f ON f.id = h.frame_id
      WHERE f.py_parent_id IS NOT NULL
    ),
    _per_frame AS (
      SELECT gap_id, frame_id, SUM(total_ns) AS total_ns, SUM(self_part) AS self_ns
      FROM _signed
      GROUP BY gap_id, frame_id
    )
  SELECT p.gap_id, p.frame_id, s.name AS frame, s.depth, p.self_ns, p.total_ns
  FROM _per_frame AS p
  JOIN slice AS s ON s.id = p.frame_id
);

-- `tt_gap_frames!` with each frame's rank in its gap: `frame_rank` 1 = the most self time
-- (ties: more total time, then frame name, then depth). The one ranking host_stalls and
-- gap_causes share.
CREATE PERFETTO MACRO tt_ranked_gap_frames(
  -- Gaps: columns `id`, `rank`, `ts`, `dur`; non-overlapping per rank.
  gaps TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  SELECT
    f.*,
    ROW_NUMBER() OVER (
      PARTITION BY f.gap_id ORDER BY f.self_ns DESC, f.total_ns DESC, f.frame, f.depth
    ) AS frame_rank
  FROM tt_gap_frames!($gaps) AS f
);
