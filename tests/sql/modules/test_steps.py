"""`tokentrace.steps` on a tiny inline trace: steps from Proton scopes (outermost only), from host
frames by function name (a step left open closed at the end of the host trace), and found by
themselves (`tt_auto_steps`: the frame called once per launch interval).

TP0: `decode_step` scopes [0,100) (holding a nested one) and [100,250). TP1 (no scope): a loop
frame [0,1000) calling `schedule` at 0, 100, ..., 700 (50 µs each, one Triton launch in each)
and once more at 800, never returning (µs)."""

from __future__ import annotations

import pytest

from support.tiny_traces import US, frame, rank, rows, scope, tiny_engine

STEPS = "SELECT rank, step_index, ts, dur, step_dur, source, step_name, open FROM tt_steps!({name})"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    events = [
        *rank("TP0", 10, 20, tp=0), *rank("TP1", 30, 40, tp=1),
        scope("decode_step", 0, 100, 20), scope("decode_step", 10, 10, 20), scope("decode_step", 100, 150, 20),
        frame("loop (s.py:1)", 0, 1000, 30),
        *[event for ts in range(0, 800, 100) for event in (
            frame("schedule (s.py:2)", ts, 50, 30), frame("cuda_utils.launch", ts + 10, 1, 30))],
        {"ph": "B", "name": "schedule (s.py:2)", "cat": "FEE", "pid": 30, "tid": 30, "ts": 800},
    ]
    with tiny_engine(tmp_path_factory.mktemp("steps"), events) as engine:
        yield engine


def test_scope_steps_outermost_only(engine):
    assert rows(engine, "steps", STEPS.format(name="'decode_step'")) == [
        ("TP0", 1, 0, 100 * US, 100 * US, "scope", "decode_step", 0),
        ("TP0", 2, 100 * US, 150 * US, 150 * US, "scope", "decode_step", 0)]


def test_host_frame_steps_and_the_open_one(engine):
    host = [(index + 1, index * 100 * US, 100 * US, 50 * US, "host", 0) for index in range(8)]
    host += [(9, 800 * US, 200 * US, 200 * US, "host", 1)]  # closed at the loop's end, 1000
    assert [row[1:3] + row[3:6] + row[7:] for row in rows(engine, "steps", STEPS.format(name="'schedule'"))] == host
    assert rows(engine, "steps", STEPS.format(name="'nothing'")) == []


def test_found_steps(engine):
    assert rows(engine, "steps", "SELECT rank, name, depth, calls, launch_share FROM tt_auto_steps") == [
        ("TP1", "schedule (s.py:2)", 1, 8, 1)]  # finished calls only
    found = rows(engine, "steps", STEPS.format(name="''"))
    assert [row[:2] + row[5:7] for row in found] == [
        ("TP0", 1, "scope", "decode_step"), ("TP0", 2, "scope", "decode_step"),
        *[("TP1", index, "auto", "schedule (s.py:2)") for index in range(1, 10)]]
