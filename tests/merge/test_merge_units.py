"""Merge pieces on tiny inline traces (no engine): lanes, flows, ids, the rows -> serialise
seam, overflow, parts, fallback, determinism."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import orjson
import pytest

from tokentrace.errors import TokentraceWarning
from tokentrace.merge import merge
from tokentrace.merge.gpu_events import assign_sublanes, build_rows
from tokentrace.merge.ids import FRESH_ID_START, UINT32_MAX, IdAllocator
from tokentrace.merge.rank_events import warn_overflow
from tokentrace.sources._raw import VizInfo, copy_events
from tokentrace.sources.proton import read_proton

BASE = 1_000_000_000_000


def _kernel(ts, dur, tid=200007, name="k"):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": tid, "ts": ts, "dur": dur}


def _proton(path: Path, events: list, base: int | None = BASE) -> Path:
    doc = {"displayTimeUnit": "ns", "traceEvents": events}
    if base is not None:
        doc["baseTimeNanoseconds"] = base
    path.write_text(json.dumps(doc))
    return path


def _viz(path: Path, events: list, metadata: dict | None = None) -> Path:
    meta = {"version": "1.0.4", "baseTimeNanoseconds": BASE - 5_000_000, **(metadata or {})}
    path.write_text(json.dumps({"traceEvents": events, "viztracer_metadata": meta, "file_info": {}}))
    return path


HOST = [
    {"ph": "M", "pid": 7, "tid": 7, "name": "process_name", "args": {"name": "MainProcess"}},
    {"pid": 7, "tid": 7, "ts": 10.5, "ph": "X", "dur": 1.0, "name": "f", "cat": "FEE"},
    {"pid": 7, "tid": 7, "ts": 3.25, "ph": "X", "dur": 20.0, "name": "outer", "cat": "FEE"},
]


def test_overlapping_kernels_get_a_second_lane(tmp_path):
    trace = read_proton([_proton(tmp_path / "p.json", [_kernel(0, 10), _kernel(5, 10), _kernel(20, 1)])])
    lanes = assign_sublanes(trace.events)
    assert [lanes[id(e)] for e in trace.events] == [1, 2, 1]
    out = build_rows(trace, 1).serialise(0, IdAllocator())
    assert out.n_extra_lanes == 1 and [t.name for t in out.threads] == ["GPU Stream 7", "GPU Stream 7 (lane 2)"]


def test_nested_scope_stays_on_its_lane(tmp_path):
    scope = {"ph": "X", "cat": "scope", "name": "s", "pid": 0, "tid": 0}
    trace = read_proton([_proton(tmp_path / "p.json", [scope | {"ts": 0, "dur": 10}, scope | {"ts": 2, "dur": 3}])])
    assert set(assign_sublanes(trace.events).values()) == {1}


def test_repeated_flow_starts_are_paired_and_renumbered(tmp_path):
    flow = {"name": "launch->kernel", "cat": "flow", "pid": 0, "id": 5, "bp": "e"}
    events = [
        {"ph": "X", "cat": "scope", "name": "s", "pid": 0, "tid": 0, "ts": 0, "dur": 100},
        flow | {"ph": "s", "tid": 0, "ts": 1}, flow | {"ph": "s", "tid": 0, "ts": 2},
        _kernel(10, 5), flow | {"ph": "f", "tid": 200007, "ts": 10},
        _kernel(20, 5), flow | {"ph": "f", "tid": 200007, "ts": 20},
    ]
    trace = read_proton([_proton(tmp_path / "p.json", events)])
    out = build_rows(trace, 41).serialise(0, IdAllocator())
    written = orjson.loads(b"[" + out.events[0] + b"]")
    ids = [(e["ph"], e["id"]) for e in written if e["ph"] in "sf"]
    assert ids == [("s", 41), ("s", 42), ("f", 41), ("f", 42)] and out.n_flows == 2


def test_fresh_ids_skip_taken_ones_and_stay_in_uint32():
    ids = IdAllocator(taken={10, 11, 13}, start=10)
    assert [ids.take() for _ in range(3)] == [12, 14, 15]
    last = IdAllocator(start=UINT32_MAX)
    assert last.take() == UINT32_MAX
    with pytest.raises(OverflowError):
        last.take()


def test_merged_ids_never_collide_with_host_ids(tmp_path):
    host = [dict(e, pid=4_000_000_001, tid=4_000_000_001) for e in HOST]
    viz = _viz(tmp_path / "a-TP0.viztracer.json", host)
    proton = _proton(tmp_path / "a-TP0.proton.chrome_trace", [_kernel(0, 10), _kernel(5, 10)])
    merge([viz, proton], tmp_path / "m.json")
    events = orjson.loads((tmp_path / "m.json").read_bytes())["traceEvents"]
    gpu = {e["tid"] for e in events if e["pid"] != 4_000_000_001}
    assert 4_000_000_001 not in gpu and all(0 < t <= UINT32_MAX for t in gpu)


def test_overflow_warning_names_the_first_host_time(tmp_path):
    info = VizInfo(tmp_path / "v.json", overflow=True, first_ts_ns=3_250)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TokentraceWarning)
        warn_overflow(info)
    assert len(caught) == 1 and "before ts 3.250 µs" in str(caught[0].message)


def test_streamed_scan_finds_earliest_ts_at_the_end(tmp_path):
    info = copy_events(_viz(tmp_path / "v.json", HOST), lambda data: None)
    assert info.first_ts_ns == 3_250 and info.pids == {7} and info.streamed


def test_unusual_layout_falls_back_to_a_full_parse(tmp_path):
    path = tmp_path / "v.json"  # metadata before the events: the streaming reader cannot copy it
    path.write_text(json.dumps({"viztracer_metadata": {"baseTimeNanoseconds": 5, "overflow": True}, "traceEvents": HOST}))
    chunks = []
    info = copy_events(path, chunks.append)
    assert not info.streamed and info.base_ns == 5 and info.overflow and info.first_ts_ns == 3_250
    assert len(orjson.loads(b"[" + b"".join(chunks) + b"]")) == len(HOST)


def test_proton_parts_are_read_together(tmp_path):
    part0 = _proton(tmp_path / "a.proton.part_0.chrome_trace", [_kernel(0, 10)], base=BASE)
    part1 = _proton(tmp_path / "a.proton.part_1.chrome_trace", [_kernel(0, 10)], base=BASE + 50_000)
    trace = read_proton([part0, part1])
    assert trace.base_ns == BASE and [e.ts_ns for e in trace.events] == [0, 50_000]


def test_merge_twice_same_bytes(tmp_path):
    viz = _viz(tmp_path / "a-TP0.viztracer.json", HOST)
    proton = _proton(tmp_path / "a-TP0.proton.chrome_trace", [_kernel(0, 10), _kernel(5, 10)])
    merge([viz, proton], tmp_path / "one.json")
    merge([viz, proton], tmp_path / "two.json")
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()


def test_truncated_host_report_fails_from_the_copy_process(tmp_path):
    """An error of the forked copy comes back as the same InputError, and no output is left."""
    from tokentrace.errors import InputError

    viz = _viz(tmp_path / "a-TP0.viztracer.json", HOST)
    viz.write_bytes(viz.read_bytes()[:-40])
    proton = _proton(tmp_path / "a-TP0.proton.chrome_trace", [_kernel(0, 10)])
    with pytest.raises(InputError, match="a-TP0.viztracer.json"):
        merge([viz, proton], tmp_path / "out.json")
    assert not (tmp_path / "out.json").exists()


def test_rows_hold_neither_offset_nor_ids(tmp_path):
    """What the merge builds during the host copy depends on the Proton trace alone."""
    trace = read_proton([_proton(tmp_path / "p.json", [_kernel(0.5, 10), _kernel(5, 10, tid=200003)])])
    rows = build_rows(trace, 1)
    assert rows.times_ns == [500, 5_000] and rows.first_ns == 500 and [t.tid for t in rows.threads] == [0, 0]
    assert not any({"pid", "tid", "ts"} & row.keys() for row in rows.rows)


def test_serialise_takes_ids_after_the_host_ids_and_times_on_the_offset(tmp_path):
    """One pass sets the offset and the fresh ids: pid, one tid per thread (first use), then the
    tokentrace thread; fresh ids that the host uses are skipped, times are Proton + offset."""
    trace = read_proton([_proton(tmp_path / "p.json", [_kernel(0.5, 10), _kernel(5, 10, tid=200003)])])
    host_ids = {FRESH_ID_START, FRESH_ID_START + 2}
    out = build_rows(trace, 1).serialise(2_000_250, IdAllocator(host_ids))
    first, second, third, fourth = (FRESH_ID_START + k for k in (1, 3, 4, 5))
    assert (out.pid, out.rank_tid) == (first, fourth) and out.first_ts_ns == 2_000_750
    written = orjson.loads(b"[" + out.events[0] + b"]")
    assert [(e["pid"], e["tid"], e["ts"]) for e in written] == [(first, second, 2000.75), (first, third, 2005.25)]
    assert [(t.tid, t.name) for t in out.threads] == [(third, "GPU Stream 3"), (second, "GPU Stream 7")]


def test_serialise_depends_only_on_its_arguments(tmp_path):
    """The rows keep no state from a pass: serialising them again gives a fresh, exact result."""
    trace = read_proton([_proton(tmp_path / "p.json", [_kernel(0, 10), _kernel(5, 10)])])
    rows = build_rows(trace, 1)
    rows.serialise(123_456_789, IdAllocator({FRESH_ID_START}))
    again = rows.serialise(0, IdAllocator())
    assert again == build_rows(trace, 1).serialise(0, IdAllocator())


def test_plain_and_gzip_reports_merge_to_the_same_bytes(tmp_path):
    """A plain report's anchor is no longer read early: both merges take it from the copy."""
    import gzip

    viz = _viz(tmp_path / "a-TP0.viztracer.json", HOST)
    packed = tmp_path / "b-TP0.viztracer.json.gz"
    packed.write_bytes(gzip.compress(viz.read_bytes()))
    proton = _proton(tmp_path / "a-TP0.proton.chrome_trace", [_kernel(0, 10), _kernel(5, 10)])
    merge([viz, proton], tmp_path / "plain.json")
    merge([packed, proton], tmp_path / "packed.json")
    packed_bytes = (tmp_path / "packed.json").read_bytes().replace(str(packed).encode(), str(viz).encode())
    assert (tmp_path / "plain.json").read_bytes() == packed_bytes
    events = orjson.loads(packed_bytes)["traceEvents"]
    assert [e["ts"] for e in events if e.get("cat") == "kernel"] == [5_000, 5_005]  # 5 ms offset
