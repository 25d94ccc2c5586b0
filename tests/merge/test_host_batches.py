"""``--combine`` reads each VizTracer report in parsed batches of whole events
(:mod:`tokentrace.merge.host_batches`), not whole: the batches must hold exactly the report's
events, in order, wherever the byte boundaries fall."""

from __future__ import annotations

import gzip
import json

import orjson
import pytest

from support.paths import DATA
from tokentrace.errors import InputError
from tokentrace.merge.host_batches import read_batches

SAMPLE_VIZ = DATA / "sample_t39_tp2" / "sample-TP0.viztracer.json.gz"


def _collect(path, batch_bytes):
    batches: list[list] = []
    info, kept = read_batches(path, batches.append, batch_bytes)
    return batches, info, kept


@pytest.mark.slow
def test_batches_of_a_real_report_are_its_events_in_order():
    whole = orjson.loads(gzip.decompress(SAMPLE_VIZ.read_bytes()))
    batches, info, kept = _collect(SAMPLE_VIZ, 64 << 10)
    assert len(batches) > 10
    assert [e for batch in batches for e in batch] == whole["traceEvents"]
    assert kept["viztracer_metadata"] == whole["viztracer_metadata"]
    assert kept["file_info"] == whole["file_info"]
    assert info.base_ns == whole["viztracer_metadata"]["baseTimeNanoseconds"]


def _report(tmp_path, events) -> tuple:
    path = tmp_path / "r.viztracer.json"
    doc = {"traceEvents": events, "viztracer_metadata": {"version": "1.0.4", "overflow": False}}
    path.write_text(json.dumps(doc))
    return path, events


def _event(ts, **args):
    return {"pid": 7, "tid": 7, "ts": ts, "ph": "X", "dur": 1.5, "name": "f", "cat": "FEE", "args": args}


@pytest.mark.parametrize("batch_bytes", [1, 40, 97, 1 << 20])
def test_boundaries_inside_strings_and_nested_objects_are_not_cut(tmp_path, batch_bytes):
    events = [_event(10.0 + i, text="x}, {y" * (i % 3), nested={"a": {"b": i}}, last="}, {")
              for i in range(50)]
    path, events = _report(tmp_path, events)
    batches, _, _ = _collect(path, batch_bytes)
    assert [e for batch in batches for e in batch] == events
    if batch_bytes < 100:
        assert len(batches) > 5


def test_an_event_that_is_no_object_is_named_by_its_index(tmp_path):
    events = [_event(10.0 + i) for i in range(30)]
    path = tmp_path / "r.viztracer.json"
    body = ", ".join(json.dumps(e) for e in events[:20]) + ", [1, 2], " + ", ".join(
        json.dumps(e) for e in events[20:])
    path.write_text('{"traceEvents": [' + body + '], "viztracer_metadata": {"version": "1.0.4"}}')
    with pytest.raises(InputError, match=r"traceEvents\[20\] is not an event object"):
        _collect(path, 200)
