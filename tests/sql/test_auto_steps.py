"""`tt_auto_steps` on tiny traces built from the edge-case trace's rank records
(`traces/edge_cases.json`), its host frames replaced.

The module scores frame groups at depth <= `_tt_auto_step_shallow_depth()` first and deeper ones
only for a rank where no shallow group qualifies; these traces put the step frame on both sides of
that bound, with a deeper group that would also qualify, and compare with the one-pass scores of
every group computed here in SQL. Frames of libraries below the engine (torch, triton, numpy, the
standard library, code without a file), named as Kineto and VizTracer write their paths, are never
the step, even when they run once per launch before the engine's step frame.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokentrace.catalog import open_trace

EDGE = Path(__file__).parent / "traces" / "edge_cases.json"

# The scores of every group in one pass (the definition the two passes must reproduce).
ONE_PASS = """
WITH counted AS (
  SELECT gid, is_launch,
    SUM(is_launch) OVER (PARTITION BY rank ORDER BY ts, is_launch DESC ROWS UNBOUNDED PRECEDING)
      AS launches_before
  FROM (
    SELECT rank, ts, NULL AS gid, 1 AS is_launch FROM tt_launch_calls
    UNION ALL
    SELECT m.rank, m.ts, g.gid, 0 FROM _tt_auto_step_frames AS m
    JOIN _tt_auto_step_groups AS g USING (rank, name, depth)
  )
)
SELECT g.rank, g.name, g.depth, COUNT(*) AS calls,
  CAST(COUNT(DISTINCT launches_before) - 1 AS DOUBLE) / (COUNT(*) - 1) AS launch_share
FROM counted JOIN _tt_auto_step_groups AS g USING (gid)
WHERE is_launch = 0
GROUP BY gid
"""


def _frames(pid: int, step_depth: int, steps: int = 10) -> list[dict]:
    """A loop whose step frame sits at ``step_depth`` (wrapped in `wrap_<d>` frames), each step
    launching once; a `poll` frame at depth 1 called 10 times before the loop (no launch between
    its calls); below each step four nested `inner_<k>` frames, the launch in the deepest."""
    def frame(name, ts, dur):
        return {"ph": "X", "name": f"{name} (loop.py:1)", "cat": "FEE", "pid": pid, "tid": pid,
                "ts": ts, "dur": dur}

    total = 100 + steps * 100
    events = [frame("main", 0, total)]
    events += [frame("poll", 1 + 5 * i, 4) for i in range(10)]
    for depth in range(1, step_depth):  # wrappers, depth 1 .. step_depth - 1
        events.append(frame(f"wrap_{depth}", 60 + depth, total - 60 - 2 * depth))
    for i in range(steps):
        start = 100 + 100 * i
        events.append(frame("step", start, 90))
        events += [frame(f"inner_{k}", start + 10 + k, 50 - 2 * k) for k in range(1, 5)]
        events.append({"ph": "X", "name": "cuda_utils.launch", "cat": "FEE", "pid": pid,
                       "tid": pid, "ts": start + 20, "dur": 5})
    return events


def _trace(tmp_path: Path, depths: dict[int, int]) -> Path:
    """The edge-case trace with the host frames of the pids in ``depths`` (10: TP0, 30: TP1)
    replaced by :func:`_frames` at the given step depth."""
    trace = json.loads(EDGE.read_text())
    kept = [e for e in trace["traceEvents"] if not (e.get("cat") == "FEE")]
    for pid, depth in depths.items():
        kept += _frames(pid, depth)
    trace["traceEvents"] = kept
    path = tmp_path / "steps.json"
    path.write_text(json.dumps(trace))
    return path


@pytest.mark.parametrize("depths", [{10: 6, 30: 2}, {10: 4, 30: 5}, {10: 1, 30: 9}])
def test_outermost_step_frame_on_both_sides_of_the_shallow_bound(tmp_path, depths):
    with open_trace(_trace(tmp_path, depths), warn=False) as engine:
        engine.query("INCLUDE PERFETTO MODULE tokentrace.steps;")
        bound = int(engine.query("SELECT _tt_auto_step_shallow_depth() AS d").d[0])
        assert min(depths.values()) <= bound < max(depths.values())  # both passes are used
        found = engine.query("SELECT * FROM tt_auto_steps ORDER BY rank")
        assert found["rank"].tolist() == ["TP0", "TP1"]
        assert found.name.tolist() == ["step (loop.py:1)"] * 2
        assert found.depth.tolist() == [depths[10], depths[30]]
        assert found.calls.tolist() == [10, 10] and (found.launch_share == 1.0).all()
        # the frames below the step qualify too: only their depth puts them behind it
        every = engine.query(ONE_PASS)
        inner = every[every.name.str.startswith("inner_")]
        assert (inner.launch_share == 1.0).all() and len(inner) == 8
        poll = every[every.name == "poll (loop.py:1)"]
        assert (poll.launch_share == 0.0).all()
        # the deep pass scored only the ranks without a shallow winner, and as one pass would
        scored = engine.query("""
            SELECT g.rank, g.name, g.depth, c.calls, c.launch_share
            FROM _tt_auto_step_scores AS c JOIN _tt_auto_step_groups AS g USING (gid)""")
        deep_rank = "TP0" if depths[10] > bound else "TP1"
        merged = every.merge(scored, on=["rank", "name", "depth"], suffixes=("", "_two"))
        assert (merged.calls == merged.calls_two).all()
        assert (merged.launch_share == merged.launch_share_two).all()
        skipped = every[(every.depth > bound) & (every["rank"] != deep_rank)]
        assert len(skipped) and len(merged) == len(every) - len(skipped)


def _library_first(pid: int, library: str, steps: int = 10) -> list[dict]:
    """A loop whose iterations call ``library`` (a frame name) and then `step (engine.py:1)`, both
    at depth 1, each iteration launching once inside the step: both run once per launch; the
    library frame runs first."""
    def frame(name, ts, dur):
        return {"ph": "X", "name": name, "cat": "FEE", "pid": pid, "tid": pid, "ts": ts, "dur": dur}

    events = [frame("main (engine.py:1)", 0, 100 + steps * 100)]
    for i in range(steps):
        start = 100 + 100 * i
        events += [frame(library, start, 5), frame("step (engine.py:1)", start + 10, 80),
                   {"ph": "X", "name": "cuda_utils.launch", "cat": "FEE", "pid": pid, "tid": pid,
                    "ts": start + 20, "dur": 5}]
    return events


@pytest.mark.parametrize("library, is_library", [
    ("__getitem__ (torch/nn/modules/container.py:334)", True),  # Kineto: path from sys.path
    ("ModuleList.__getitem__ (/venv/lib/python3.12/site-packages/torch/nn/modules/container.py:334)", True),
    ("__call__ (/usr/lib/python3/dist-packages/triton/runtime/jit.py:419)", True),
    ("sum (numpy/_core/fromnumeric.py:2313)", True),
    ("__enter__ (<stdlib>/contextlib.py:132)", True),
    ("__init__ (<string>:2)", True),
    ("nn.Module: Linear_0 (<nn.Module>:0)", True),
    # the engine's own code, wherever installed, stays a candidate (and runs first here)
    ("get_batch (/venv/lib/python3.12/site-packages/vllm/v1/core/sched/scheduler.py:80)", False),
    ("get_batch (/home/u/torchtitan_fork/loop.py:80)", False),
])
def test_library_frames_are_never_the_step(tmp_path, library, is_library):
    trace = json.loads(EDGE.read_text())
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("cat") != "FEE"]
    trace["traceEvents"] += _library_first(10, library) + _library_first(30, library)
    path = tmp_path / "library.json"
    path.write_text(json.dumps(trace))
    with open_trace(path, warn=False) as engine:
        engine.query("INCLUDE PERFETTO MODULE tokentrace.steps;")
        found = engine.query("SELECT * FROM tt_auto_steps ORDER BY rank")
    expected = "step (engine.py:1)" if is_library else library
    assert found.name.tolist() == [expected] * 2
    assert found.depth.tolist() == [1, 1] and found.calls.tolist() == [10, 10]
