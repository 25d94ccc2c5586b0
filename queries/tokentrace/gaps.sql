-- tokentrace.gaps: when each rank's GPU was busy, when it sat idle, and why it restarted late.
--
-- GPU busy = the union of the rank's kernel intervals (all streams and overlap lanes of its GPU
-- process merged; kernels that overlap, as with Hopper's programmatic dependent launch, count
-- once). A gap is a maximal idle interval inside the rank's active window (first kernel start to
-- last kernel end), so idle time before the first or after the last kernel is never a gap. Gaps
-- always have dur > 0: back-to-back kernels (next start == previous end) leave none.
--
-- The launch of the kernel that ends a gap comes from `tokentrace.launches`: the host call that
-- launched it (a Triton launcher call, a CUDA-graph replay, a torch call) or its Proton scope,
-- as a window [launch_ts, launch_end_ts] in which the launch happened. Times in ns.
--
-- Gap classes (see `tt_gap_class`): `host_late` (the host was still launching when the GPU went
-- idle, or, with no call showing the launch, stream order says it had not launched yet),
-- `graph_replay` (the next kernel is a node of the CUDA-graph replay that ran the kernel before
-- the gap: idle between the nodes of a running graph), `launch_overhead` (launched before the
-- gap, dur <= launch_overhead_ns), `gpu_queued` (the GPU waited on something else: the next
-- kernel was launched before the gap, or its launch call ended early in the gap and the kernel
-- then sat queued longer than the host took to launch it (and 100 µs), or it is the first node of a graph
-- launched before the gap), `no_link` (no host call and no Proton scope explains the next kernel).
--
-- Phase: `startup` on evidence, else `steady`. A host-side gap (not `gpu_queued`: a kernel that
-- was launched and waited on the GPU is a GPU-side wait wherever it lies) before which the rank's
-- GPU had run fewer than `startup_kernels` kernels is `startup` when the host shows set-up in it
-- (`tt_gap_shows_setup`, `tokentrace.setup`: a module load, an initialisation, a compiler's frame,
-- a first call many times longer than the next call of its name) or shows nothing at all. The
-- first launches after the profiler starts pay such one-off costs (on the real traces one 30-75
-- ms gap after the first kernel, in the first call of an op); those gaps are not the steady state
-- a serving engineer tunes, so the stall profile leaves them out. An early gap with the host in
-- its ordinary step code is `steady`: every step pays it.
--
-- Host-caused (`by_host`): `host_late` inside the launching thread's traced span
-- (`tt_host_windows`).

INCLUDE PERFETTO MODULE tokentrace.launches;
INCLUDE PERFETTO MODULE tokentrace.setup;

-- The shortest gap, in ns, that the runnable queries report by default (100 µs): the default
-- argument `min_gap_ns` of every `tokentrace.queries.*` function that takes one. The frames and
-- causes of the gaps at least this long are computed once per trace (`tokentrace.stalls`,
-- `tokentrace.causes`).
CREATE PERFETTO FUNCTION tt_default_min_gap_ns()
RETURNS DURATION AS
SELECT 100000;

-- Kernels in start order with the running end of the rank's busy time before each (to find where a
-- new busy interval starts). Kernels are taken in start order, ties by launch (none last), name and
-- id: the order in which the first kernel of a busy interval is its first row. (Which kernel of a
-- tie in start time begins a busy interval does not change the intervals: only the first of a tie
-- can, and only when it starts after every earlier kernel ended.) The ordered passes here carry the
-- sort keys and times alone; the first kernels' launch columns are looked up by id once per busy
-- interval (`_tt_island_edges`), not carried through the sorts.
CREATE PERFETTO TABLE _tt_gap_kernels AS
SELECT
  id, rank, ts, ts + dur AS end_ts, name, launch_ts,
  MAX(ts + dur) OVER (
    PARTITION BY rank ORDER BY ts, launch_ts IS NULL, launch_ts, name, id
    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
  ) AS prev_max_end
FROM tt_kernel_launches
WHERE dur >= 0;

-- Kernels numbered by the busy interval (island) of their rank that they belong to; `is_first`
-- marks the first kernel of each island (earliest start; ties: earliest launch, then name);
-- `pos`: the kernel's 1-based position on its rank in that order (`pos - 1` kernels before it).
CREATE PERFETTO TABLE _tt_kernel_islands AS
SELECT
  id, rank, ts, end_ts, name, is_first,
  SUM(is_first) OVER w AS island,
  ROW_NUMBER() OVER w AS pos
FROM (
  SELECT *, IIF(prev_max_end IS NULL OR ts > prev_max_end, 1, 0) AS is_first
  FROM _tt_gap_kernels
)
WINDOW w AS (
  PARTITION BY rank ORDER BY ts, launch_ts IS NULL, launch_ts, name, id
  ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
);

-- The kernels' launches by kernel id, for the first kernel of each busy interval.
CREATE PERFETTO INDEX _tt_kernel_launches_by_id ON tt_kernel_launches(id);

-- Per busy interval: its first kernel (the `is_first` row, and its `pos`, with its launch) and
-- its last kernel (latest end; ties: latest start, then name), and how many kernels it has: one
-- aggregation, and a ranking of the kernels of the intervals that hold more than one.
CREATE PERFETTO TABLE _tt_island_edges AS
WITH
  _edges AS MATERIALIZED (
    SELECT
      rank, island,
      MAX(IIF(is_first, id, NULL)) AS first_id,
      MAX(IIF(is_first, ts, NULL)) AS first_ts,
      MAX(IIF(is_first, name, NULL)) AS first_kernel,
      MAX(IIF(is_first, pos, NULL)) AS first_pos,
      MAX(end_ts) AS last_end,
      COUNT(*) AS kernels
    FROM _tt_kernel_islands
    GROUP BY rank, island
  ),
  -- The kernel that ends last in each island of more than one kernel (ties: the later start, then
  -- name, then id). Most islands hold one kernel, so the ranking sorts the kernels of the few
  -- islands of more, not every kernel.
  _last AS MATERIALIZED (
    SELECT rank, island, id, name
    FROM (
      SELECT
        k.rank, k.island, k.id, k.name,
        ROW_NUMBER() OVER (
          PARTITION BY k.rank, k.island ORDER BY k.end_ts DESC, k.ts DESC, k.name, k.id
        ) AS last_pos
      FROM _tt_kernel_islands AS k
      WHERE (k.rank, k.island) IN (SELECT rank, island FROM _edges WHERE kernels > 1)
    )
    WHERE last_pos = 1
  )
SELECT
  e.rank, e.island, e.first_id, e.first_ts, e.first_kernel,
  k.launch_ts AS first_launch_ts,
  k.launch_end_ts AS first_launch_end_ts,
  k.launch_source AS first_launch_source,
  k.launch_name AS first_launch_name,
  k.launch_utid AS first_launch_utid,
  e.first_pos, e.last_end,
  -- (a correlated lookup, made for the islands of more than one kernel only: a join of every island
  -- to `_last` would touch every island for the few that need it)
  IIF(e.kernels = 1, e.first_kernel,
      (SELECT l.name FROM _last AS l WHERE l.rank = e.rank AND l.island = e.island)) AS last_kernel,
  IIF(e.kernels = 1, e.first_id,
      (SELECT l.id FROM _last AS l WHERE l.rank = e.rank AND l.island = e.island)) AS last_id,
  e.kernels
FROM _edges AS e
JOIN tt_kernel_launches AS k ON k.id = e.first_id
ORDER BY e.rank, e.island;

-- The islands by number, for the next island of each (`tt_gpu_idle`). The table is sorted by
-- rank, then island, so island numbers are in order only while the trace holds one rank; with
-- several, each lookup scans the rows, a cost in the square of the islands. (An index on both
-- columns is not used for that join.)
CREATE PERFETTO INDEX _tt_island_edges_by_island ON _tt_island_edges(island);

-- Per rank (in rank order), how many busy intervals and gaps the ranks before it have: the ids of
-- `tt_gpu_busy` and `tt_gpu_idle` are those counts plus the interval's number on its rank. The
-- islands are numbered 1, 2, ... in time order on each rank, so this is their rank and time
-- order, without a window pass over every row (which sorts the rows, names and all).
CREATE PERFETTO TABLE _tt_rank_island_offsets AS
SELECT
  rank,
  IFNULL(SUM(islands) OVER w, 0) AS islands_before,
  IFNULL(SUM(islands - 1) OVER w, 0) AS gaps_before
FROM (SELECT rank, MAX(island) AS islands FROM _tt_island_edges GROUP BY rank)
WINDOW w AS (ORDER BY rank ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
ORDER BY rank;

-- GPU busy time: one row per maximal interval in which at least one kernel of the rank runs.
-- Non-overlapping per rank (usable with `intervals.intersect`).
CREATE PERFETTO TABLE tt_gpu_busy(
  -- Row id (for `_interval_intersect!`; not stable across traces).
  id LONG,
  -- Rank tag (see `tt_ranks.rank`).
  rank STRING,
  -- 1-based index of the busy interval on its rank, in time order.
  busy_index LONG,
  -- Start, ns.
  ts TIMESTAMP,
  -- Duration, ns.
  dur DURATION,
  -- Kernels in the interval.
  kernels LONG
) AS
SELECT
  o.islands_before + e.island AS id,
  e.rank,
  e.island AS busy_index,
  e.first_ts AS ts,
  e.last_end - e.first_ts AS dur,
  e.kernels
FROM _tt_island_edges AS e
JOIN _tt_rank_island_offsets AS o USING (rank)
ORDER BY e.rank, e.island;

-- Every GPU idle interval of every rank (no minimum length): from the end of one busy interval
-- to the start of the next. Non-overlapping per rank.
CREATE PERFETTO TABLE tt_gpu_idle(
  -- Row id (for `_interval_intersect!`; not stable across traces).
  id LONG,
  -- Rank tag.
  rank STRING,
  -- Gap start (the end of the busy interval before it), ns.
  ts TIMESTAMP,
  -- Gap length, ns (> 0).
  dur DURATION,
  -- Kernel whose end starts the gap (latest end before it).
  prev_kernel STRING,
  -- Kernel whose start ends the gap.
  next_kernel STRING,
  -- Its slice.
  next_kernel_id JOINID(slice.id),
  -- Its start, ns (= ts + dur).
  next_kernel_ts TIMESTAMP,
  -- Start of its launch (host call or Proton scope, see `tt_kernel_launches`), ns; NULL: none.
  launch_ts TIMESTAMP,
  -- End of that call or scope, ns: the launch happened in [launch_ts, launch_end_ts].
  launch_end_ts TIMESTAMP,
  -- Where the launch comes from: `triton_launch`, `graph_replay`, `proton_scope`, `host_call`,
  -- `stream_order` (no call shows it; inferred, launch_ts NULL), NULL (no launch found).
  launch_source STRING,
  -- Name of the launching call or scope.
  launch_name STRING,
  -- Kernels the rank's GPU had run before the gap (all kernels of the busy intervals before it).
  kernels_before LONG,
  -- 1 when the next kernel is a node of the graph replay that ran the kernel before the gap (both
  -- launched by one replay call): the gap lies inside a running graph.
  in_replay LONG,
  -- Start of the launch of the kernel before the gap, ns (NULL: none found).
  prev_launch_ts TIMESTAMP,
  -- The host thread the gap is judged on: the thread of the call that launched the next
  -- kernel, else the rank's launching thread (`tt_ranks.host_main_utid`).
  host_utid JOINID(thread.id)
) AS
WITH
  -- Each busy interval with the next one of its rank (an equality join: no window pass); the
  -- kernels before the gap are those before the next interval's first kernel.
  _paired AS (
    SELECT
      e.rank, e.island,
      n.first_pos - 1 AS kernels_before,
      e.last_end AS ts,
      e.last_kernel AS prev_kernel,
      n.first_ts AS next_kernel_ts,
      n.first_kernel AS next_kernel,
      n.first_id AS next_kernel_id,
      n.first_launch_ts AS launch_ts,
      n.first_launch_end_ts AS launch_end_ts,
      n.first_launch_source AS launch_source,
      n.first_launch_name AS launch_name,
      n.first_launch_utid AS launch_utid,
      IFNULL(pk.launch_source = 'graph_replay' AND n.first_launch_source = 'graph_replay'
             AND pk.launch_ts = n.first_launch_ts, 0) AS in_replay,
      pk.launch_ts AS prev_launch_ts
    FROM _tt_island_edges AS e
    JOIN _tt_island_edges AS n ON n.rank = e.rank AND n.island = e.island + 1
    LEFT JOIN tt_kernel_launches AS pk ON pk.id = e.last_id
  )
SELECT
  -- (gap k of a rank lies after its busy interval k: rank, then time order)
  o.gaps_before + p.island AS id,
  p.rank, p.ts, p.next_kernel_ts - p.ts AS dur,
  p.prev_kernel, p.next_kernel, p.next_kernel_id, p.next_kernel_ts,
  IIF(p.inferred, NULL, p.launch_ts) AS launch_ts,
  IIF(p.inferred, NULL, p.launch_end_ts) AS launch_end_ts,
  CASE
    WHEN NOT p.inferred THEN p.launch_source
    -- the latest torch call before the kernel ended before the gap: the launch came from a
    -- call the trace does not show (indexing, operators); in stream order the kernel cannot
    -- have been launched before the GPU went idle. Only where the host was traced.
    WHEN p.next_kernel_ts <= hw.end_ts THEN 'stream_order'
  END AS launch_source,
  IIF(p.inferred, NULL, p.launch_name) AS launch_name,
  p.kernels_before, p.in_replay, p.prev_launch_ts,
  IFNULL(p.launch_utid, r.host_main_utid) AS host_utid
FROM (
  SELECT *, IFNULL(launch_source = 'host_call' AND launch_end_ts < ts, 0) AS inferred
  FROM _paired
) AS p
JOIN tt_ranks AS r USING (rank)
JOIN _tt_rank_island_offsets AS o USING (rank)
LEFT JOIN tt_host_windows AS hw USING (rank)
ORDER BY p.rank, p.ts;

-- How long a kernel must wait after its launch call (or scope) ended, beyond the host's part of
-- the gap, to be queued on the GPU rather than late from the host, ns: an idle GPU starts a
-- launched kernel within a few µs (a graph's first node 2.6 µs after its launch returns, in the
-- median, on compile_kineto), so a wait of the shortest gap the queries report by default
-- (100 µs) is no launch latency. A fixed bound, so that whether a gap is `host_late` does not
-- depend on `launch_overhead_ns`.
CREATE PERFETTO FUNCTION _tt_min_queued_ns()
RETURNS LONG AS
SELECT 100000;

-- The class of a gap from its start, length and the launch window of the next kernel.
--
-- A launch is GPU-side (`gpu_queued`) when the kernel sat queued after it: its call (or scope)
-- ended before the gap, or ended in the gap and the kernel then waited longer than both the
-- launch overhead and the host's part of the gap. Only an exact launch says so: a `host_call` is
-- the latest torch call before the kernel, a guess whose end proves nothing. A stream wait on an
-- event recorded late (or before the profiler started), a graph launched long before its first
-- node runs: the host launched in time, the GPU waited (SGLang's decode on MI300X: a kernel
-- launched 38 µs into a 463 ms gap).
CREATE PERFETTO FUNCTION tt_gap_class(
  -- Gap start, ns.
  ts LONG,
  -- Gap length, ns.
  dur LONG,
  -- Start of the next kernel's launching call or scope, ns (NULL: no launch found).
  launch_ts LONG,
  -- Its end, ns.
  launch_end_ts LONG,
  -- Its source (`tt_kernel_launches.launch_source`).
  launch_source STRING,
  -- Longest gap still called `launch_overhead` when the launch came before the gap, ns.
  launch_overhead_ns LONG,
  -- 1: the next kernel is a node of the replay that ran the kernel before the gap
  -- (`tt_gpu_idle.in_replay`).
  in_replay LONG
)
-- `host_late`, `graph_replay`, `launch_overhead`, `gpu_queued` or `no_link`.
RETURNS STRING AS
SELECT CASE
  WHEN $launch_source IS NULL THEN 'no_link'
  -- Launched early in the gap, then queued on the GPU for longer than the host took.
  WHEN $launch_source IN ('runtime_call', 'triton_launch', 'graph_replay', 'proton_scope')
    AND $launch_end_ts >= $ts
    AND $ts + $dur - $launch_end_ts > MAX(_tt_min_queued_ns(), $launch_end_ts - $ts) THEN 'gpu_queued'
  -- A replay call that began before the GPU went idle launched the next kernel in time: a host
  -- still inside it (or already in the next replay call) was not late. Other calls and scopes
  -- are windows: the launch came in them, so one still open when the GPU went idle is late
  -- (in stream order a kernel launched before the GPU went idle starts at once).
  WHEN $launch_source = 'graph_replay' AND $launch_ts >= $ts THEN 'host_late'
  -- Idle between the nodes of a running graph, or while the host was still in the replay call.
  WHEN $launch_source = 'graph_replay' AND ($in_replay OR $launch_end_ts >= $ts) THEN 'graph_replay'
  WHEN $launch_source = 'stream_order' OR $launch_end_ts >= $ts THEN 'host_late'
  -- Launched before the gap (a graph's first node included: it waited to start).
  WHEN $dur <= $launch_overhead_ns THEN 'launch_overhead'
  ELSE 'gpu_queued'
END;

-- How long of a `host_late` gap the host owes: from the gap start to the launch, the launch
-- taken as the call's start when it began in the gap, else as its end (a call open when the GPU
-- went idle launched late in it), clamped to the gap; the whole gap when the launch is only
-- inferred (`stream_order`).
CREATE PERFETTO FUNCTION _tt_host_caused_ns(
  -- Gap start, ns.
  ts LONG,
  -- Gap length, ns.
  dur LONG,
  -- Launch window start, ns.
  launch_ts LONG,
  -- Launch window end, ns.
  launch_end_ts LONG
)
-- ns in [0, dur].
RETURNS LONG AS
SELECT IIF($launch_ts IS NULL, $dur,
  MIN($dur, MAX(0, IIF($launch_ts >= $ts, $launch_ts, MIN($launch_end_ts, $ts + $dur)) - $ts)));

-- The GPU gaps of at least `min_gap_ns`, classified, numbered per rank in time order.
-- Columns: `id` (of `tt_gpu_idle`), `rank`, `gap_index` (1-based), `ts`, `dur`, `end_ts`,
-- `prev_kernel`, `next_kernel`, `next_kernel_ts`, `launch_ts`, `launch_end_ts`,
-- `launch_source`, `launch_name`, `gap_class`, `host_caused_ns` (host_late: see
-- `_tt_host_caused_ns`; graph_replay, launch_overhead and gpu_queued: 0; no_link: NULL),
-- `kernels_before`, `phase` (`startup` when kernels_before < startup_kernels and the host shows
-- set-up or nothing, else `steady`),
-- `by_host` (1: host_late, and the gap lies inside the launching thread's traced span,
-- `tt_host_windows`: GPU idle before the host trace's first event or after its last is not
-- charged to the host, whose activity then is unknown; `idle_budget` counts it `untraced`),
-- `class_uncertain` (1: the rank's clock offset was estimated with an interval wider than the
-- gap, so the launch may fall on either side of its start).
CREATE PERFETTO MACRO tt_gpu_gaps(
  -- Minimum gap length, ns (an expression).
  min_gap_ns Expr,
  -- Longest `launch_overhead` gap, ns (an expression).
  launch_overhead_ns Expr,
  -- Gaps before the rank's first `startup_kernels` kernels ran may be `startup`, on evidence (an
  -- expression).
  startup_kernels Expr
)
RETURNS TableOrSubquery AS
(
  SELECT
    g.id, g.rank,
    ROW_NUMBER() OVER (PARTITION BY g.rank ORDER BY g.ts) AS gap_index,
    g.ts, g.dur, g.ts + g.dur AS end_ts,
    g.prev_kernel, g.next_kernel, g.next_kernel_ts, g.launch_ts, g.launch_end_ts,
    g.launch_source, g.launch_name,
    g.gap_class,
    CASE g.gap_class
      WHEN 'no_link' THEN NULL
      WHEN 'host_late' THEN _tt_host_caused_ns(g.ts, g.dur, g.launch_ts, g.launch_end_ts)
      ELSE 0
    END AS host_caused_ns,
    g.kernels_before,
    IIF(g.kernels_before < $startup_kernels AND g.gap_class != 'gpu_queued'
        AND tt_gap_shows_setup(g.host_utid, g.ts, g.dur), 'startup', 'steady') AS phase,
    IIF(g.gap_class = 'host_late' AND g.traced, 1, 0) AS by_host,
    g.class_uncertain
  FROM (
    SELECT
      i.*,
      tt_gap_class(i.ts, i.dur, i.launch_ts, i.launch_end_ts, i.launch_source, $launch_overhead_ns,
                   i.in_replay) AS gap_class,
      IFNULL(i.ts >= hw.ts AND i.ts + i.dur <= hw.end_ts, 0) AS traced,
      IIF(r.align_method = 'estimated' AND r.offset_hi_ns - r.offset_lo_ns > i.dur, 1, 0)
        AS class_uncertain
    FROM tt_gpu_idle AS i
    JOIN tt_ranks AS r USING (rank)
    LEFT JOIN tt_host_windows AS hw USING (rank)
    WHERE i.dur >= $min_gap_ns
  ) AS g
);

-- `tt_gpu_gaps!` as a table function: the same rows, for the queries that read their gaps in
-- several places or hand them to the cause and frame macros. A macro is SQL pasted into the
-- query, and the engine copies the tree of a common table expression into every place that
-- reads it (the cause and frame macros read their gap set many times, and each copy of the set
-- carries the gap macro's whole statement), so a query built on the macro is planned many times
-- over. The function's statement is planned on its own; the query reads its rows like a table's.
CREATE PERFETTO FUNCTION tt_gpu_gap_rows(
  -- Minimum gap length, ns.
  min_gap_ns LONG,
  -- Longest `launch_overhead` gap, ns.
  launch_overhead_ns LONG,
  -- Gaps before the rank's first `startup_kernels` kernels ran may be `startup`, on evidence.
  startup_kernels LONG
)
-- The columns of `tt_gpu_gaps!`.
RETURNS TABLE(
  -- Gap id (`tt_gpu_idle.id`).
  id LONG,
  -- Rank tag.
  rank STRING,
  -- 1-based index of the gap on its rank, in time order.
  gap_index LONG,
  -- Gap start, ns.
  ts TIMESTAMP,
  -- Gap length, ns.
  dur DURATION,
  -- Gap end, ns.
  end_ts TIMESTAMP,
  -- Kernel whose end starts the gap.
  prev_kernel STRING,
  -- Kernel whose start ends the gap.
  next_kernel STRING,
  -- Its start, ns.
  next_kernel_ts TIMESTAMP,
  -- Start of its launch, ns (NULL: none).
  launch_ts TIMESTAMP,
  -- End of its launch, ns.
  launch_end_ts TIMESTAMP,
  -- Where the launch comes from (`tt_gpu_idle.launch_source`).
  launch_source STRING,
  -- Name of the launching call or scope.
  launch_name STRING,
  -- `tt_gap_class`.
  gap_class STRING,
  -- The part of the gap the host owes, ns.
  host_caused_ns LONG,
  -- Kernels the rank's GPU had run before the gap.
  kernels_before LONG,
  -- `startup` or `steady`.
  phase STRING,
  -- 1: host-caused.
  by_host LONG,
  -- 1: the rank's clock offset is less certain than the gap is long.
  class_uncertain LONG
) AS
SELECT * FROM tt_gpu_gaps!($min_gap_ns, $launch_overhead_ns, $startup_kernels);
