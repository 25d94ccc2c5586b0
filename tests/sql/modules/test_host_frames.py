"""`tokentrace.host_frames` on a tiny inline trace: the Python frames of the launching thread
only (no C calls, no empty frames, no other thread), each with its nearest Python caller (a C
call in between skipped); and the frame-name functions."""

from __future__ import annotations

import pytest

from support.tiny_traces import US, frame, rank, rows, thread_name, tiny_engine

STDLIB = "helper (/usr/lib/python3.12/json/__init__.py:9)"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    events = [
        *rank("TP0", 10, 20), thread_name(10, 15, "other"),
        frame("loop (a.py:1)", 0, 100, 10),
        frame("torch._C.call", 10, 40, 10),
        frame("inner (a.py:2)", 20, 10, 10),  # called from the C call
        frame("zero (a.py:3)", 55, 0, 10),
        frame(STDLIB, 60, 10, 10),
        frame("other (a.py:4)", 0, 50, 10, 15),  # not a launching thread
    ]
    with tiny_engine(tmp_path_factory.mktemp("host_frames"), events) as engine:
        yield engine


def test_frames_and_python_parents(engine):
    assert rows(engine, "host_frames", """
        SELECT f.rank, t.tid, f.ts, f.dur, f.depth, f.name, p.name AS py_parent
        FROM tt_host_frames AS f JOIN thread AS t USING (utid)
        LEFT JOIN slice AS p ON p.id = f.py_parent_id ORDER BY f.ts""") == [
        ("TP0", 10, 0, 100 * US, 0, "loop (a.py:1)", None),
        ("TP0", 10, 20 * US, 10 * US, 2, "inner (a.py:2)", "loop (a.py:1)"),
        ("TP0", 10, 60 * US, 10 * US, 1, STDLIB, "loop (a.py:1)")]


@pytest.mark.parametrize(("name", "python", "stdlib", "function"), [
    ("host_stall (x.py:105)", 1, 0, "host_stall"),
    ("Layer.forward (/m/model.py:3)", 1, 0, "Layer.forward"),
    ("time.sleep", 0, 0, "time.sleep"),
    ("dumps (/usr/lib/python3.12/json/__init__.py:231)", 1, 1, "dumps"),
    ("get (<frozen importlib._bootstrap>:1)", 1, 1, "get"),
    ("f (/venv/lib/python3.12/site-packages/torch/a.py:1)", 1, 0, "f"),
])
def test_frame_name_functions(engine, name, python, stdlib, function):
    assert rows(engine, "host_frames", f"""
        SELECT tt_is_python_frame('{name}'), tt_is_stdlib_frame('{name}'),
          tt_frame_function('{name}')""") == [(python, stdlib, function)]
