-- tokentrace.gc_pauses: the pauses of Python's garbage collector that VizTracer recorded.
--
-- With `log_gc` (`VizTracer(log_gc=True)`, `viztracer --log_gc`), VizTracer writes a counter
-- `garbage collection` at each collection's start (`collecting` 1) and end (`collecting` 0),
-- from `gc.callbacks`; Perfetto makes it the process counter track `garbage collection
-- collecting`. A collection runs in the thread whose allocation triggered it and holds the GIL
-- throughout: every Python thread of the process stops, the launching thread included. Automatic
-- collections call no `gc.collect`, so without these events their time looks like the running
-- frame's own (`busy`). Times in ns.

INCLUDE PERFETTO MODULE intervals.intersect;
INCLUDE PERFETTO MODULE tokentrace.host_frames;

-- Every collection of each rank's host processes: start and length. Non-overlapping per rank
-- (one collector runs at a time in a process, and a rank has one host process).
CREATE PERFETTO TABLE tt_gc_pauses(
  -- Row id (for `_interval_intersect!`).
  id LONG,
  -- Rank tag.
  rank STRING,
  -- The collecting process.
  upid JOINID(process.id),
  -- Collection start, ns.
  ts TIMESTAMP,
  -- Its length, ns.
  dur DURATION
) AS
SELECT ROW_NUMBER() OVER (ORDER BY rp.rank, c.ts) AS id, rp.rank, t.upid, c.ts, c.next_ts - c.ts AS dur
FROM (
  SELECT track_id, ts, value, LEAD(ts) OVER (PARTITION BY track_id ORDER BY ts) AS next_ts
  FROM counter
  WHERE track_id IN (
    SELECT id FROM process_counter_track WHERE name = 'garbage collection collecting'
  )
) AS c
JOIN process_counter_track AS t ON t.id = c.track_id
JOIN tt_rank_processes AS rp ON rp.upid = t.upid
WHERE c.value = 1 AND c.next_ts IS NOT NULL
ORDER BY rp.rank, c.ts;

-- Per gap of `g` (columns `id`, `rank`, `utid`, `ts`, `dur`; non-overlapping per rank), the
-- collector's time in it: `gap_id`, `overlap` (ns), `caller` (the deepest Python frame of the
-- gap's thread, not the standard library's, open when the longest of those collections began:
-- the code whose allocation triggered it, or that it stopped).
CREATE PERFETTO MACRO _tt_cause_gc_pauses(
  -- The judged gaps.
  g TableOrSubquery
)
RETURNS TableOrSubquery AS
(
  WITH
    _gaps AS MATERIALIZED (
      SELECT id, rank, ts, dur, utid FROM $g
      WHERE EXISTS (SELECT 1 FROM tt_gc_pauses)
    ),
    _pieces AS MATERIALIZED (
      SELECT
        ii.id_0 AS gap_id, ii.dur, p.ts AS pause_ts,
        ROW_NUMBER() OVER (PARTITION BY ii.id_0 ORDER BY ii.dur DESC, p.ts) AS pos,
        SUM(ii.dur) OVER (PARTITION BY ii.id_0) AS overlap
      FROM _interval_intersect!((_gaps, tt_gc_pauses), (rank)) AS ii
      JOIN tt_gc_pauses AS p ON p.id = ii.id_1
    ),
    _longest AS MATERIALIZED (
      SELECT x.gap_id, x.overlap, g.utid, x.pause_ts
      FROM _pieces AS x
      JOIN _gaps AS g ON g.id = x.gap_id
      WHERE x.pos = 1
    ),
    _open AS MATERIALIZED (
      SELECT * FROM _tt_slices_open_at!((SELECT gap_id AS key, utid, pause_ts AS at FROM _longest))
    )
  SELECT
    x.gap_id, x.overlap,
    (
      SELECT o.name FROM _open AS o
      WHERE o.key = x.gap_id AND o.name GLOB '* (*:*)' AND NOT _tt_is_stdlib!(o.name)
      ORDER BY o.depth DESC
      LIMIT 1
    ) AS caller
  FROM _longest AS x
);
