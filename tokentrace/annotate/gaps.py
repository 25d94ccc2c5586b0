"""What the annotations say: each rank's GPU gaps with their cause (the bundled ``gap_causes``
query) and, for every stall, the host slice the cause ran in and a moment inside it where that
slice is the innermost one open on its thread (a flow start binds to that slice).

Perfetto orders a flow by its two slices' start times (the earlier one is ``slice_out``), and a
stall's cause often starts after the GPU went idle: so the flow does not end on the gap slice but
on a slice nested in it, the cause's host slice clipped to the gap (:meth:`HostSlice.span_in`),
which never starts before the host slice.
"""

from __future__ import annotations

import bisect
import dataclasses

import pandas as pd

from tokentrace.catalog import run_query
from tokentrace.errors import InputError
from tokentrace.units import format_ms

#: The gap_causes columns an annotation carries in its args (NULL ones are left out).
ARG_COLUMNS = ("gap_index", "gap_class", "phase", "cause_kind", "cause_function", "cause_frame",
               "cause_thread", "cause_call", "cause_op", "cause_ns", "host_caused_ns", "prev_kernel",
               "next_kernel", "launch_source", "launch_name")


@dataclasses.dataclass(frozen=True)
class HostSlice:
    """Where a stall's flow starts: a slice of a host thread (its start and end, ns) and a
    moment inside it where it is the innermost open slice."""

    pid: int
    tid: int
    name: str
    ts_ns: int
    end_ns: int
    at_ns: int

    def span_in(self, gap_ts: int, gap_end: int) -> tuple[int, int]:
        """The part of ``[gap_ts, gap_end]`` this slice covers (the cause slice on the GPU idle
        track; the flow ends there)."""
        return max(self.ts_ns, gap_ts), min(self.end_ns, gap_end)


@dataclasses.dataclass(frozen=True)
class Gap:
    """One annotation: a GPU gap of a rank, with what the slice says about it.

    Attributes:
        rank: the rank tag.
        gpu_pid: the rank's GPU process (the annotation track goes there).
        ts_ns, dur_ns: the gap on the trace's axis, ns.
        name: the slice name: ``<cause_kind>: <cause_function>``, or the gap class.
        is_stall: a stall (gap_causes' ``is_stall``).
        args: the slice's args (gap class, duration, cause frame, thread, call ...).
        source: the host slice of a stall's cause (None: not a stall, or none found).
    """

    rank: str
    gpu_pid: int
    ts_ns: int
    dur_ns: int
    name: str
    is_stall: bool
    args: dict
    source: HostSlice | None = None


def find_gaps(engine, min_gap_us: float, stall_min_us: float | None = None) -> list[Gap]:
    """Runs ``gap_causes`` on the loaded merged trace; returns its gaps as annotations, those of
    stalls with their host slice.

    Raises:
        InputError: a rank of the gaps has no ``tokentrace.rank`` instant (not a merged trace).
        QueryError: the parameters are out of range.
    """
    params: dict[str, object] = {"min_gap_us": min_gap_us}
    if stall_min_us is not None:
        params["stall_min_us"] = stall_min_us
    rows = run_query(engine, "gap_causes", params)
    pids = gpu_pids(engine)
    records = rows.to_dict("records")
    missing = sorted({str(r["rank"]) for r in records} - set(pids))
    if missing:
        raise InputError(f"{engine.trace_path}: rank(s) {', '.join(missing)} have no 'tokentrace.rank' "
                         "instant naming their GPU process; merge the profile again")
    gaps = [_gap(row, pids[row["rank"]]) for row in records]
    sources = _host_slices(engine, {i: g for i, g in enumerate(gaps) if g.is_stall and _cause_named(g)})
    return [dataclasses.replace(g, source=sources[i]) if i in sources else g for i, g in enumerate(gaps)]


#: The rows of :func:`annotation_support`: ``kind`` ``gpu`` (``pid``: the rank's GPU process),
#: ``id`` (``pid``: a pid or tid the trace uses) or ``source`` (a stall's host slice: ``pid``,
#: ``tid``, ``name``, ``start_ns``, ``end_ns``, ``at_ns``; see :class:`HostSlice`). Times are the
#: trace file's own (no column a shift onto a common axis would move).
SUPPORT_COLUMNS = ("rank", "kind", "gap_index", "pid", "tid", "name", "start_ns", "end_ns", "at_ns")


def annotation_support(engine, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """What annotating a trace needs besides its ``gap_causes`` rows (``tables["gap_causes"]``,
    as the query gave them on this ``engine``): each rank's GPU pid, the ids the trace uses,
    and the host slice of every stall (:func:`find_gaps` without running the query again). A
    :class:`~tokentrace.fleet.RankStep` of ``tokentrace analyze``: it runs in the engine that
    ran ``gap_causes``. Ranks without a ``tokentrace.rank`` instant get no ``gpu`` row (and
    their stalls no source)."""
    pids = gpu_pids(engine)
    rows: list[tuple] = [(rank, "gpu", None, pid, None, None, None, None, None) for rank, pid in pids.items()]
    ids = sorted(used_ids(engine))
    rows += [(rank, "id", None, i, None, None, None, None, None) for rank in pids for i in ids]
    records = [r for r in tables["gap_causes"].to_dict("records") if str(r["rank"]) in pids]
    gaps = [_gap(row, pids[str(row["rank"])]) for row in records]
    sources = _host_slices(engine, {i: g for i, g in enumerate(gaps) if g.is_stall and _cause_named(g)})
    for i, found in sources.items():
        rows.append((gaps[i].rank, "source", int(gaps[i].args["gap_index"]), found.pid, found.tid,
                     found.name, found.ts_ns, found.end_ns, found.at_ns))
    frame = pd.DataFrame.from_records(rows, columns=list(SUPPORT_COLUMNS))
    for column in ("gap_index", "pid", "tid", "start_ns", "end_ns", "at_ns"):
        frame[column] = frame[column].astype("Int64")
    return frame


def gaps_from_rows(rows: pd.DataFrame, support: pd.DataFrame, shift_ns: int = 0) -> list[Gap]:
    """The annotations of a trace from its ``gap_causes`` rows and :func:`annotation_support`
    rows (those of its ranks), the gaps' ``ts`` less ``shift_ns`` (the shift that put the rows
    on a common axis: the file's own times again). Gaps of a rank without a GPU pid are left
    out."""
    pids = {str(r): int(p) for r, k, p in zip(support["rank"], support["kind"], support["pid"]) if k == "gpu"}
    sources = {(str(r["rank"]), int(r["gap_index"])): HostSlice(int(r["pid"]), int(r["tid"]), str(r["name"]),
                                                                int(r["start_ns"]), int(r["end_ns"]), int(r["at_ns"]))
               for r in support[support["kind"] == "source"].to_dict("records")}
    gaps = []
    for row in rows.to_dict("records"):
        rank = str(row["rank"])
        if rank not in pids:
            continue
        row = {**row, "ts": int(row["ts"]) - shift_ns}
        gap = _gap(row, pids[rank])
        source = sources.get((rank, int(gap.args["gap_index"])))
        gaps.append(dataclasses.replace(gap, source=source) if source is not None else gap)
    return gaps


def gpu_pids(engine) -> dict[str, int]:
    """rank -> the pid of its GPU process (the ``tokentrace.rank`` instants' ``gpu_pid``)."""
    frame = engine.query("INCLUDE PERFETTO MODULE tokentrace.ranks; "
                         "SELECT r.rank, p.pid FROM tt_ranks AS r JOIN process AS p "
                         "ON p.upid = r.gpu_upid WHERE r.is_merged = 1")
    return dict(zip(frame["rank"], (int(p) for p in frame["pid"])))


def used_ids(engine) -> set[int]:
    """Every pid and tid the loaded trace uses (a new thread must take none of them)."""
    frame = engine.query("SELECT tid AS id FROM thread WHERE tid IS NOT NULL "
                         "UNION SELECT pid AS id FROM process WHERE pid IS NOT NULL")
    return {int(v) for v in frame["id"]}


def gap_name(row: dict) -> str:
    """``<cause_kind>: <cause_function>`` (``(no host frame)`` without a function), else the gap
    class (gaps the host did not cause)."""
    kind = _value(row.get("cause_kind"))
    if kind is None:
        return str(row["gap_class"])
    return f"{kind}: {_value(row.get('cause_function')) or '(no host frame)'}"


def _gap(row: dict, gpu_pid: int) -> Gap:
    args = {name: _value(row.get(name)) for name in ARG_COLUMNS}
    args = {k: (int(v) if k.endswith("_ns") or k == "gap_index" else v)
            for k, v in args.items() if v is not None}
    args["duration_ms"] = format_ms(int(row["dur"]), digits=3)
    args["stall"] = bool(row["is_stall"])
    return Gap(str(row["rank"]), gpu_pid, int(row["ts"]), int(row["dur"]), gap_name(row),
               bool(row["is_stall"]), args)


def _value(value):
    """None for SQL NULL (None, NaN, pd.NA); plain Python ints/strings otherwise."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def _cause_named(gap: Gap) -> bool:
    return "cause_thread" in gap.args and ("cause_call" in gap.args or "cause_frame" in gap.args)


_CANDIDATES_SQL = """
INCLUDE PERFETTO MODULE tokentrace.ranks;
SELECT rp.rank, t.name AS thread, t.utid = r.host_main_utid AS is_main, p.pid, t.tid,
  s.id, s.ts, s.dur, s.name
FROM tt_rank_processes AS rp
JOIN tt_ranks AS r USING (rank)
JOIN process AS p ON p.upid = rp.upid
JOIN thread AS t ON t.upid = rp.upid
JOIN thread_track AS tt ON tt.utid = t.utid
JOIN slice AS s ON s.track_id = tt.id
WHERE rp.role != 'gpu' AND s.name IN ({names}) AND s.dur > 0
  AND s.ts < {hi} AND s.ts + s.dur > {lo}
ORDER BY s.id
"""


def _host_slices(engine, stalls: dict[int, Gap]) -> dict[int, HostSlice]:
    """{position: stall} -> {position: its host slice} (stalls whose slice is not found are left
    out); the slice is :func:`_pick`'s, the moment :func:`_free_moment`'s."""
    if not stalls:
        return {}
    names = sorted({g.args[k] for g in stalls.values() for k in ("cause_call", "cause_frame")
                    if k in g.args})
    sql = _CANDIDATES_SQL.format(names=", ".join(_text(n) for n in names),
                                 lo=min(g.ts_ns for g in stalls.values()),
                                 hi=max(g.ts_ns + g.dur_ns for g in stalls.values()))
    candidates = _Candidates(engine.query(sql).to_dict("records"))
    chosen = {i: c for i, c in ((i, candidates.pick(g)) for i, g in stalls.items()) if c is not None}
    children = _children(engine, [c["id"] for c in chosen.values()])
    out = {}
    for i, c in chosen.items():
        ts, end = int(c["ts"]), int(c["ts"]) + int(c["dur"])
        at = _free_moment(stalls[i], ts, end, children.get(int(c["id"]), []))
        out[i] = HostSlice(int(c["pid"]), int(c["tid"]), str(c["name"]), ts, end, at)
    return out


class _Candidates:
    """The host slices a stall's cause may have run in, by rank, thread name and slice name,
    each group in start order: a stall reads the few of its names that can overlap it, not every
    candidate (thousands of stalls and of candidates on a long run)."""

    def __init__(self, candidates: list[dict]) -> None:
        groups: dict[tuple, list[dict]] = {}
        for c in candidates:
            groups.setdefault((c["rank"], c["thread"], c["name"]), []).append(c)
        self._groups = {}
        for key, found in groups.items():
            found.sort(key=lambda c: (c["ts"], c["id"]))  # among equal starts, in id order
            self._groups[key] = (found, [c["ts"] for c in found], max(c["dur"] for c in found))

    def pick(self, gap: Gap) -> dict | None:
        """The cause's slice: on the cause thread (the launching thread first among namesakes),
        overlapping the gap, the C call before the frame, then the longest overlap, then the
        earliest start, then the lowest id."""
        lo, hi = gap.ts_ns, gap.ts_ns + gap.dur_ns
        call, frame = gap.args.get("cause_call"), gap.args.get("cause_frame")
        best, best_key = None, None
        for name in dict.fromkeys((call, frame)):
            found, starts, longest = self._groups.get((gap.rank, gap.args["cause_thread"], name), ((), (), 0))
            # those starting before the gap's end and late enough to end after its start
            for c in found[bisect.bisect_right(starts, lo - longest):bisect.bisect_left(starts, hi)]:
                if c["ts"] + c["dur"] <= lo:
                    continue
                overlap = min(c["ts"] + c["dur"], hi) - max(c["ts"], lo)
                key = (c["name"] != call, not c["is_main"], -overlap, c["ts"], c["id"])
                if best_key is None or key < best_key:
                    best, best_key = c, key
        return best


def _children(engine, ids: list) -> dict[int, list[tuple[int, int]]]:
    """slice id -> its direct children as (ts, end) ns, in time order."""
    if not ids:
        return {}
    # (each parent looked up by id: an IN list on parent_id read every slice)
    parents = ", ".join(f"({int(i)})" for i in ids)
    frame = engine.query(f"SELECT s.parent_id, s.ts, s.dur FROM (SELECT column1 AS id FROM (VALUES {parents})) AS p "
                         "CROSS JOIN slice AS s ON s.parent_id = p.id ORDER BY s.parent_id, s.ts")
    out: dict[int, list[tuple[int, int]]] = {}
    for parent, ts, dur in zip(frame["parent_id"], frame["ts"], frame["dur"]):
        out.setdefault(int(parent), []).append((int(ts), int(ts) + max(int(dur), 0)))
    return out


def flow_end_ns(start_ns: int, end_ns: int) -> int:
    """Where a stall's flow ends in its cause slice ``[start_ns, end_ns]`` on the GPU idle track:
    just before the slice's end (up to 1 µs), so that the flow's start, inside the host slice,
    comes first (Perfetto drops a flow whose end it reads before its start)."""
    return end_ns - max(1, min((end_ns - start_ns) // 10, 1000))


def _free_moment(gap: Gap, start: int, end: int, children: list[tuple[int, int]]) -> int:
    """The middle of the longest stretch of the host slice ``[start, end]``, inside the gap and
    before the flow's end, that none of its children covers (the slice is then the innermost
    one open); the middle of that window when children cover all of it."""
    gap_end = gap.ts_ns + gap.dur_ns
    lo = max(start, gap.ts_ns)
    hi = flow_end_ns(lo, min(end, gap_end))
    for window in ((lo, hi), (start, hi)):
        free = _free_stretches(window, children)
        if free:
            a, b = max(free, key=lambda s: (s[1] - s[0], -s[0]))
            if b - a >= 3:
                return (a + b) // 2
    return (lo + hi) // 2


def _free_stretches(window: tuple[int, int], children: list[tuple[int, int]]) -> list[tuple[int, int]]:
    lo, hi = window
    free, cursor = [], lo
    for c_start, c_end in children:
        if c_end <= cursor or c_start >= hi:
            continue
        if c_start > cursor:
            free.append((cursor, c_start))
        cursor = max(cursor, c_end)
    if cursor < hi:
        free.append((cursor, hi))
    return free


def _text(value: str) -> str:
    """A SQL string literal."""
    return "'" + str(value).replace("'", "''") + "'"
