"""`tokentrace.stalls` on a tiny inline trace: the launching thread's Python frames in each GPU
gap, inclusive (total_ns) and flattened (self_ns: C calls count for their caller), ranked per gap.

TP0: k1 [0,15), k2 [100,110) launched at 95, k3 [230,240) launched at 220: gaps [15,100) (85 µs,
computed per query) and [110,230) (120 µs, over the module's 100 µs cache floor: read from the
cache). Host: loop [0,300) > step [10,150) > work [20,60) (sleeping in time.sleep [25,55)) and
tokenize [70,90) (µs)."""

from __future__ import annotations

import pytest

from support.tiny_traces import US, frame, kernel, rank, rows, tiny_engine

GAPS = "(SELECT * FROM tt_gpu_gaps!(0, 10000, 0))"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    events = [
        *rank("TP0", 10, 20),
        frame("loop (a.py:1)", 0, 300, 10), frame("step (a.py:2)", 10, 140, 10),
        frame("work (a.py:3)", 20, 40, 10), frame("time.sleep", 25, 30, 10),
        frame("tokenize (a.py:4)", 70, 20, 10),
        frame("cuda_utils.launch", 95, 1, 10), frame("cuda_utils.launch", 220, 1, 10),
        kernel("k1", 0, 15, 20), kernel("k2", 100, 10, 20), kernel("k3", 230, 10, 20),
    ]
    with tiny_engine(tmp_path_factory.mktemp("stalls"), events) as engine:
        yield engine


def test_ranked_gap_frames(engine):
    assert rows(engine, "stalls", f"""
        SELECT g.gap_index, f.frame_rank, f.frame, f.depth, f.self_ns, f.total_ns, f.rank
        FROM tt_ranked_gap_frames!({GAPS}) AS f JOIN {GAPS} AS g ON g.id = f.gap_id
        ORDER BY g.gap_index, f.frame_rank""") == [
        (1, 1, "work (a.py:3)", 2, 40 * US, 40 * US, "TP0"),  # its sleep included
        (1, 2, "step (a.py:2)", 1, 25 * US, 85 * US, "TP0"),
        (1, 3, "tokenize (a.py:4)", 2, 20 * US, 20 * US, "TP0"),
        (1, 4, "loop (a.py:1)", 0, 0, 85 * US, "TP0"),
        (2, 1, "loop (a.py:1)", 0, 80 * US, 120 * US, "TP0"),
        (2, 2, "step (a.py:2)", 1, 40 * US, 40 * US, "TP0")]


def test_top_frames_and_sums(engine):
    top = rows(engine, "stalls", f"SELECT gap_id, frame, frame_rank FROM tt_top_gap_frames!({GAPS}, 1)")
    assert sorted(top) == [(1, "work (a.py:3)", 1), (2, "loop (a.py:1)", 1)]
    assert rows(engine, "stalls", f"""
        SELECT rank, frame, gaps, self_ns, total_ns FROM tt_gap_frame_sums!({GAPS}) ORDER BY frame""") == [
        ("TP0", "loop (a.py:1)", 2, 80 * US, 205 * US), ("TP0", "step (a.py:2)", 2, 65 * US, 125 * US),
        ("TP0", "tokenize (a.py:4)", 1, 20 * US, 20 * US), ("TP0", "work (a.py:3)", 1, 40 * US, 40 * US)]


def test_the_cache_floor_is_the_queries_default_shortest_gap(engine):
    # The frames and causes of gaps of at least tt_default_min_gap_ns() are computed once and
    # shared; every runnable query takes that function as its default shortest gap, so the
    # report's gaps are cached (a literal default could drift from the cache floor).
    from tokentrace.catalog import list_queries

    readers = [spec for spec in list_queries() if spec.param("min_gap_us")]
    defaults = {spec.call.args[[p.name for p in spec.params].index("min_gap_us")] for spec in readers}
    assert len(readers) >= 8 and defaults == {"tt_default_min_gap_ns()"}
    assert {spec.param("min_gap_us").default for spec in readers} == {100}  # µs
    assert rows(engine, "stalls", "SELECT tt_default_min_gap_ns() AS ns") == [(100 * US,)]
