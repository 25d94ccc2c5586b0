"""`tt_host_windows` (the launching thread's traced span) on the edge-case trace
(`traces/edge_cases.json`) and on variants of it: the span is read from the outermost slices,
except on a track holding an unfinished slice, whose nested slices may end after it."""

from __future__ import annotations

import json
from pathlib import Path

from tokentrace.catalog import open_trace

EDGE = Path(__file__).parent / "traces" / "edge_cases.json"
US = 1000


def _windows(path: Path) -> dict:
    with open_trace(path, warn=False) as engine:
        engine.query("INCLUDE PERFETTO MODULE tokentrace.launches;")
        every = engine.query("""
            SELECT r.rank, MIN(s.ts) AS ts, MAX(s.ts + s.dur) AS end_ts
            FROM slice AS s
            JOIN thread_track AS tt ON s.track_id = tt.id
            JOIN tt_ranks AS r ON r.host_main_utid = tt.utid
            GROUP BY r.rank ORDER BY r.rank""")  # every slice: the definition
        found = engine.query("SELECT * FROM tt_host_windows ORDER BY rank")
        assert found.values.tolist() == every.values.tolist()
        return {row.rank: (row.ts, row.end_ts) for row in found.itertuples()}


def _with_events(tmp_path: Path, *events: dict) -> Path:
    trace = json.loads(EDGE.read_text())
    trace["traceEvents"] += list(events)
    path = tmp_path / "windows.json"
    path.write_text(json.dumps(trace))
    return path


def _event(ph: str, name: str, ts: int, dur: int | None = None) -> dict:
    event = {"ph": ph, "name": name, "cat": "FEE", "pid": 10, "tid": 10, "ts": ts}
    return event | ({"dur": dur} if dur is not None else {})


def test_span_of_the_edge_trace():
    assert _windows(EDGE) == {"TP0": (0, 600 * US), "TP1": (0, 50 * US)}


def test_unfinished_slice_and_what_it_holds(tmp_path):
    # `serve` begins at 700 µs and never ends; a frame nested in it ends at 900 µs
    path = _with_events(tmp_path, _event("B", "serve (sim.py:9)", 700),
                        _event("X", "late (sim.py:10)", 750, 150))
    assert _windows(path)["TP0"] == (0, 900 * US)


def test_nested_slice_past_its_parent_is_dropped(tmp_path):
    # Perfetto drops a complete event that overlaps its parent's end: the span stays the parent's
    path = _with_events(tmp_path, _event("X", "outer (sim.py:9)", 700, 100),
                        _event("X", "overlapping (sim.py:10)", 750, 150))
    assert _windows(path)["TP0"] == (0, 800 * US)


def test_unfinished_inside_unfinished(tmp_path):
    # `serve` and `loop` in it never end; a frame nested in `loop` ends at 1050 µs, one nested in
    # a finished `step` of `serve` within it
    path = _with_events(tmp_path, _event("B", "serve (sim.py:9)", 700),
                        _event("X", "step (sim.py:11)", 705, 10), _event("X", "in_step (sim.py:12)", 706, 5),
                        _event("B", "loop (sim.py:13)", 720),
                        _event("X", "late (sim.py:14)", 750, 300))
    assert _windows(path)["TP0"] == (0, 1050 * US)
