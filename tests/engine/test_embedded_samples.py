"""Every real sample trace through the embedded engine: counts checked against the input JSON."""

from __future__ import annotations

import collections
import gzip
import json

import pytest

from support.paths import DATA

SAMPLE_TRACES = sorted(p for p in DATA.glob("sample_*/*.gz") if ".truth." not in p.name)


def _input_counts(path) -> collections.Counter:
    """Counts the events of a Chrome JSON trace by kind, straight from the file."""
    with gzip.open(path, "rt") as handle:
        data = json.load(handle)
    events = data["traceEvents"] if isinstance(data, dict) else data
    counts = collections.Counter()
    for event in events:
        phase = event.get("ph")
        counts[phase] += 1
        if phase == "X" and event.get("cat") == "kernel":
            counts["kernel"] += 1
    return counts


def _stat(engine, name: str) -> int:
    frame = engine.query(f"SELECT IFNULL(SUM(value), 0) AS v FROM stats WHERE name = '{name}'")
    return int(frame.v[0])


def test_sample_set_is_complete():
    assert len(SAMPLE_TRACES) == 8, SAMPLE_TRACES


@pytest.mark.parametrize("path", SAMPLE_TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_counts_match_input_json(loaded_traces, path):
    engine = loaded_traces(path)
    expected = _input_counts(path)
    dropped = _stat(engine, "slice_drop_overlapping_complete_event")
    got = engine.query(
        "SELECT COUNT(*) AS slices, IFNULL(SUM(category = 'kernel'), 0) AS kernels FROM slice")
    assert got.slices[0] + dropped == expected["X"]
    assert got.kernels[0] + dropped == expected["kernel"]
    flows = engine.query("SELECT COUNT(*) AS n FROM flow").n[0]
    assert flows == expected["f"]
    assert expected["X"] > 1000  # a real trace, not an empty one


def test_result_types(loaded_traces):
    engine = loaded_traces(SAMPLE_TRACES[-1])
    frame = engine.query("SELECT ts, dur, name, parent_id, dur / 1e3 AS dur_us FROM slice "
                         "ORDER BY ts LIMIT 50")
    assert str(frame.ts.dtype) == "int64" and str(frame.dur.dtype) == "int64"
    assert str(frame.parent_id.dtype) == "Int64"  # NULL for the roots
    assert frame.parent_id.isna().any()
    assert str(frame.dur_us.dtype) == "float64"
    assert isinstance(frame.name[0], str)


def test_known_stats_problems_reported(loaded_traces):
    proton_tp1 = next(p for p in SAMPLE_TRACES if "t39" in str(p) and "TP1.proton" in p.name)
    problems = loaded_traces(proton_tp1).stats_problems()
    by_name = dict(zip(problems.name, problems.value))
    assert by_name == {"flow_duplicate_id": 2360, "slice_drop_overlapping_complete_event": 4}
