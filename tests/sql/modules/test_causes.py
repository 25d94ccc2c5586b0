"""`tokentrace.causes` on a tiny inline trace: why the host was late in each host-caused gap
(`tt_gap_causes!`), and the call classifiers.

TP0, kernels k0..k5, each next one launched by a Triton launcher call 5 µs before it, so every
gap is host_late; during the gaps the launching thread (µs):
  [10,100)  sleeper sleeps in time.sleep [16,89)            -> blocking
  [110,200) collect runs gc.collect [121,179)                -> gc
  [240,330) Tensor.item [205,241) returned as the GPU idled  -> sync, blamed for the whole gap
  [340,430) detokenize runs Python [350,420)                 -> busy (its self time)
  [440,530) attn's C call torch._C.plan [445,510)            -> busy in that call
  [540,640) Tensor.item [519,541) returned as the GPU idled, then score [545,630) runs eight
            6 µs calls of _score: 37 µs of its own, 85 with them (issue 44) -> busy in score"""

from __future__ import annotations

import pytest

from support.tiny_traces import US, frame, kernel, rank, rows, tiny_engine

GAPS = "(SELECT * FROM tt_gpu_gaps!(0, 10000, 0))"
KERNELS = [(0, 10), (100, 10), (200, 40), (330, 10), (430, 10), (530, 10), (640, 10)]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    events = [
        *rank("TP0", 10, 20),
        frame("loop (c.py:1)", 0, 1000, 10),
        frame("sleeper (c.py:2)", 15, 75, 10), frame("time.sleep", 16, 73, 10),
        frame("collect (c.py:3)", 120, 60, 10), frame("gc.collect", 121, 58, 10),
        frame("sync (c.py:4)", 204, 40, 10), frame("Tensor.item", 205, 36, 10),
        frame("detokenize (c.py:6)", 350, 70, 10),
        frame("attn (c.py:7)", 442, 74, 10), frame("torch._C.plan", 445, 65, 10),
        frame("sync (c.py:4)", 518, 24, 10), frame("Tensor.item", 519, 22, 10),
        frame("score (c.py:8)", 545, 85, 10),
        *[frame("_score (c.py:9)", 550 + 10 * index, 6, 10) for index in range(8)],
        *[frame("cuda_utils.launch", ts - 5, 1, 10) for ts, _ in KERNELS[1:]],
        *[kernel(f"k{index}", ts, dur, 20) for index, (ts, dur) in enumerate(KERNELS)],
    ]
    with tiny_engine(tmp_path_factory.mktemp("causes"), events) as engine:
        yield engine


def test_gap_causes(engine):
    assert rows(engine, "causes", f"""
        SELECT g.gap_index, g.gap_class, c.cause_kind, c.cause_thread, c.cause_function, c.cause_call,
          c.cause_ns
        FROM tt_gap_causes!({GAPS}) AS c JOIN {GAPS} AS g ON g.id = c.gap_id ORDER BY g.gap_index""") == [
        (1, "host_late", "blocking", "MainThread", "sleeper", "time.sleep", 73 * US),
        (2, "host_late", "gc", "MainThread", "collect", "gc.collect", 58 * US),
        (3, "host_late", "sync", "MainThread", "sync", "Tensor.item", 90 * US),
        (4, "host_late", "busy", "MainThread", "detokenize", None, 70 * US),
        (5, "host_late", "busy", "MainThread", "attn", "torch._C.plan", 65 * US),
        (6, "host_late", "busy", "MainThread", "score", None, 37 * US)]


@pytest.mark.parametrize(("name", "kind"), [
    ("time.sleep", "blocking"), ("_thread.lock.acquire", "blocking"), ("_queue.SimpleQueue.get", "blocking"),
    ("socket.socket.recv", "blocking"), ("Thread.join", "blocking"), ("str.join", None),
    ("gc.collect", "gc"), ("Tensor.item", "sync"), ("torch._C._cuda_synchronize", "sync"),
    ("torch.cuda.Event.synchronize", "sync"), ("builtins.hash", None), ("torch._C.plan", None)])
def test_call_wait_kind(engine, name, kind):
    assert rows(engine, "causes", f"SELECT tt_call_wait_kind('{name}')") == [(kind,)]


@pytest.mark.parametrize(("name", "caller", "expected"), [
    ("_queue.SimpleQueue.get", None, 1), ("select.epoll.poll", None, 1),
    ("_thread.lock.acquire", "'wait (/usr/lib/python3.12/threading.py:331)'", 1),
    ("_thread.lock.acquire", "'step (c.py:1)'", 0), ("time.sleep", None, 0)])
def test_is_work_wait(engine, name, caller, expected):
    assert rows(engine, "causes", f"SELECT tt_is_work_wait('{name}', {caller or 'NULL'})") == [(expected,)]


def test_host_c_calls(engine):
    assert rows(engine, "causes", "SELECT rank, ts, dur, name, wait_kind, caller, is_main FROM tt_host_c_calls") == [
        ("TP0", 16 * US, 73 * US, "time.sleep", "blocking", "sleeper (c.py:2)", 1),
        ("TP0", 121 * US, 58 * US, "gc.collect", "gc", "collect (c.py:3)", 1),
        ("TP0", 205 * US, 36 * US, "Tensor.item", "sync", "sync (c.py:4)", 1),
        ("TP0", 445 * US, 65 * US, "torch._C.plan", None, "attn (c.py:7)", 1),
        ("TP0", 519 * US, 22 * US, "Tensor.item", "sync", "sync (c.py:4)", 1)]  # >= 20 µs only


# The engine's parser refuses SQL nested past a fixed depth ("syntax error"), and every macro
# level of the cause chain counts: a user's query (or a function body) must be able to wrap the
# public macros in a few subqueries of its own.
@pytest.mark.parametrize(("macro", "levels"), [("tt_gap_causes", 3), ("tt_gap_frames", 6)])
def test_macros_leave_room_for_nesting(engine, macro, levels):
    nested = "(SELECT * FROM " * levels + f"{macro}!(g)" + ")" * levels
    cte = "WITH g AS (SELECT * FROM tt_gpu_gaps!(0, 10000, 0))"
    flat = rows(engine, "causes", f"{cte} SELECT COUNT(*) FROM {macro}!(g)")
    assert rows(engine, "causes", f"{cte} SELECT COUNT(*) FROM {nested}") == flat != [(0,)]
