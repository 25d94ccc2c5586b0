"""Launch->kernel arrows written as Perfetto v2 flows (``bind_id`` + ``flow_out``/``flow_in`` on
the two ``X`` events): the tiny cases of tokentrace.merge.flows, and on real samples the ``flow``
table of Perfetto's own trace processor against the launch->kernel pairs of the input."""

from __future__ import annotations

import decimal
import gzip
import json
import warnings
from collections import defaultdict, deque

import orjson
import pytest

from support.paths import DATA
from tokentrace.catalog import open_trace
from tokentrace.errors import TokentraceWarning
from tokentrace.merge import merge
from tokentrace.merge.flows import V2_ID_OFFSET
from tokentrace.merge.gpu_events import build_rows
from tokentrace.merge.ids import IdAllocator
from tokentrace.sources.kineto_links import CALL_CATEGORIES, LINKED_CATEGORIES
from tokentrace.sources.proton import read_proton

FLOW = {"name": "launch->kernel", "cat": "flow", "pid": 0, "bp": "e"}
PAIRS_SQL = """
SELECT so.name AS out_name, so.ts AS out_ts, si.name AS in_name, si.ts AS in_ts, p.name AS process
FROM flow AS f
JOIN slice AS so ON so.id = f.slice_out
JOIN slice AS si ON si.id = f.slice_in
JOIN thread_track AS tt ON tt.id = si.track_id
JOIN thread USING (utid)
JOIN process AS p USING (upid)
"""


def _scope(ts, dur, name="scope"):
    return {"ph": "X", "cat": "scope", "name": name, "pid": 0, "tid": 0, "ts": ts, "dur": dur}


def _kernel(ts, dur, name="k"):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 200007, "ts": ts, "dur": dur}


def _written(tmp_path, events, flow_base=1) -> list[dict]:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 10**12}))
    out = build_rows(read_proton([path]), flow_base).serialise(0, IdAllocator())
    return orjson.loads(b"[" + out.events[0] + b"]")


def test_a_scope_feeds_its_kernels_through_one_bind_id(tmp_path):
    events = [
        _scope(0, 100, "outer"), _scope(0, 50, "inner"),
        FLOW | {"ph": "s", "tid": 0, "ts": 0, "id": 5}, FLOW | {"ph": "s", "tid": 0, "ts": 0, "id": 5},
        _kernel(10, 5), FLOW | {"ph": "f", "tid": 200007, "ts": 10, "id": 5},
        _kernel(20, 5), FLOW | {"ph": "f", "tid": 200007, "ts": 20, "id": 5},
    ]
    written = _written(tmp_path, events, flow_base=41)
    assert not [e for e in written if e["ph"] in "sf"]
    by_name = defaultdict(list)
    for event in written:
        by_name[event["name"]].append(event)
    bind = V2_ID_OFFSET + 41
    # the launch binds where Perfetto would bind the ``s``: the innermost slice starting there
    assert "bind_id" not in by_name["outer"][0]
    assert by_name["inner"][0]["bind_id"] == bind and by_name["inner"][0]["flow_out"] is True
    assert [(k["bind_id"], k["flow_in"]) for k in by_name["k"]] == [(bind, True), (bind, True)]
    assert not any("flow_in" in e and "flow_out" in e for e in written)


@pytest.mark.parametrize("outer_first", [True, False])
def test_a_launch_binds_to_the_shortest_slice_starting_with_it_in_any_file_order(tmp_path, outer_first):
    scopes = [_scope(0, 100, "outer"), _scope(0, 50, "inner")]
    events = [*(scopes if outer_first else scopes[::-1]), FLOW | {"ph": "s", "tid": 0, "ts": 0, "id": 5},
              _kernel(10, 5), FLOW | {"ph": "f", "tid": 200007, "ts": 10, "id": 5}]
    written = {e["name"]: e for e in _written(tmp_path, events) if e["ph"] == "X"}
    assert written["inner"].get("flow_out") is True and "bind_id" not in written["outer"]


def test_a_launch_between_two_slices_of_one_length_stays_v1(tmp_path):
    events = [_scope(0, 50, "a"), _scope(0, 50, "b"), FLOW | {"ph": "s", "tid": 0, "ts": 0, "id": 5},
              _kernel(10, 5), FLOW | {"ph": "f", "tid": 200007, "ts": 10, "id": 5}]
    written = _written(tmp_path, events)
    assert [e["ph"] for e in written if e["ph"] in "sf"] == ["s", "f"]
    assert not any("bind_id" in e for e in written)


def test_kernels_starting_together_on_one_stream_take_their_own_arrows(tmp_path):
    """Two kernels of one stream starting at one time lie on two sub-lanes; the flow ends there,
    in file order, go to the kernels' sub-lanes in file order, so each kernel gets its own arrow."""
    events = [
        _scope(0, 100, "l1"), FLOW | {"ph": "s", "tid": 0, "ts": 0, "id": 5},
        _scope(1, 50, "l2"), FLOW | {"ph": "s", "tid": 0, "ts": 1, "id": 6},
        _kernel(10, 5, "kA"), _kernel(10, 8, "kB"),  # kB, the longer, takes the first sub-lane
        FLOW | {"ph": "f", "tid": 200007, "ts": 10, "id": 5}, FLOW | {"ph": "f", "tid": 200007, "ts": 10, "id": 6},
    ]
    written = {e["name"]: e for e in _written(tmp_path, events, flow_base=3) if e["ph"] == "X"}
    assert written["l1"]["bind_id"] == V2_ID_OFFSET + 3 and written["l2"]["bind_id"] == V2_ID_OFFSET + 4
    assert (written["kA"]["bind_id"], written["kB"]["bind_id"]) == (V2_ID_OFFSET + 3, V2_ID_OFFSET + 4)
    assert written["kA"]["tid"] != written["kB"]["tid"]  # two sub-lanes


def test_pairs_whose_slice_is_not_certain_stay_v1(tmp_path):
    events = [
        _scope(0, 100),
        FLOW | {"ph": "s", "tid": 0, "ts": 1, "id": 5},  # inside the scope, not at its start
        _kernel(10, 5), FLOW | {"ph": "f", "tid": 200007, "ts": 10, "id": 5},
        FLOW | {"ph": "s", "tid": 0, "ts": 0, "id": 6},  # the kernel starts with its launch
        _kernel(0, 5, "k0"), FLOW | {"ph": "f", "tid": 200007, "ts": 0, "id": 6},
    ]
    written = _written(tmp_path, events)
    assert [(e["ph"], e["id"]) for e in written if e["ph"] in "sf"] == [("s", 1), ("f", 1), ("s", 2), ("f", 2)]
    assert not any("bind_id" in e for e in written)


def _proton_pairs(path) -> set[tuple]:
    """(launch name, launch ts ns, kernel name, kernel ts ns) of every launch->kernel pair of a
    Proton 3.9 file: each ``f`` paired with the earliest unmatched ``s`` of its id; an end
    binds to the shortest slice of its thread starting at its time."""
    with gzip.open(path) as handle:
        events = json.load(handle, parse_float=decimal.Decimal)["traceEvents"]
    slices = defaultdict(list)
    for event in events:
        if event["ph"] == "X":
            slices[(event["tid"], event["ts"])].append(event)

    def bound(event):
        return min(slices[(event["tid"], event["ts"])], key=lambda e: e["dur"])

    pending, pairs = defaultdict(deque), set()
    for event in events:
        if event["ph"] == "s":
            pending[event["id"]].append(event)
        elif event["ph"] == "f":
            start, kernel = bound(pending[event["id"]].popleft()), bound(event)
            pairs.add((start["name"], int(start["ts"] * 1000), kernel["name"], int(kernel["ts"] * 1000)))
    return pairs


def _kineto_pairs(path) -> set[tuple]:
    """The same pairs of a torch-profiler trace: from the first runtime or driver call with a
    correlation id to each GPU activity (and ``cuda_sync`` event) that carries it."""
    with gzip.open(path) as handle:
        events = json.load(handle, parse_float=decimal.Decimal)["traceEvents"]
    calls, pairs = {}, set()
    xs = [e for e in events if e.get("ph") == "X" and "correlation" in (e.get("args") or {})]
    for event in xs:
        if event.get("cat") in CALL_CATEGORIES:
            calls.setdefault(event["args"]["correlation"], event)
    for event in xs:
        call = calls.get(event["args"]["correlation"])
        if event.get("cat") in LINKED_CATEGORIES and call is not None:
            pairs.add((call["name"], int(call["ts"] * 1000), event["name"], int(event["ts"] * 1000)))
    return pairs


def _shifted(found, expected: set[tuple]) -> set[tuple]:
    """The flow rows on the input's time axis (the rank's GPU events are shifted as one)."""
    shift = int(found.in_ts.min()) - min(pair[3] for pair in expected)
    return {(o, int(ot) - shift, i, int(it) - shift)
            for o, ot, i, it in zip(found.out_name, found.out_ts, found.in_name, found.in_ts)}


def test_flow_table_holds_the_launch_kernel_pairs_of_proton(merged_t39, sample_t39):
    path, engine = merged_t39
    data = path.read_bytes()
    assert b'"launch->kernel"' not in data and data.count(b'"flow_in":true') == 2 * 2720
    rows = engine.query(PAIRS_SQL)
    for tag in ("TP0", "TP1"):
        expected = _proton_pairs(sample_t39 / f"sample-{tag}.proton.chrome_trace.gz")
        found = rows[rows.process == f"{tag} Proton (GPU)"]
        assert len(found) == len(expected) == 2720
        assert _shifted(found, expected) == expected


@pytest.mark.slow
def test_flow_table_holds_the_launch_kernel_pairs_of_kineto(tmp_path):
    folder = DATA / "autogc_kineto"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TokentraceWarning)
        (path,) = merge([folder], tmp_path).outputs
    data = path.read_bytes()
    assert b'"ac2g"' not in data and data.count(b'"flow_in":true') == 2137
    with open_trace(path, warn=False) as engine:
        assert engine.query("SELECT COUNT(*) AS n FROM stats WHERE severity IN ('error', 'data_loss') "
                            "AND value > 0").n[0] == 0
        found = engine.query(PAIRS_SQL)
    expected = _kineto_pairs(folder / "agc-TP0.trace.json.gz")
    assert len(found) == len(expected) == 2137
    assert _shifted(found, expected) == expected
