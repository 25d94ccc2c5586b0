"""Issue 13, item 2: what the merge copies raw from a VizTracer report is checked on the way,
so a value Perfetto would refuse fails the merge naming the input and the event, not the merged
file later; a report without ``viztracer_metadata`` is copied once; a merged file fed back is
refused with what to do."""

from __future__ import annotations

import gzip
import json

import pytest
from typer.testing import CliRunner

from support.hostile import VIZ_TS, age, one_error_line, replace_once, sample_rank
from tokentrace.catalog import open_trace
from tokentrace.cli import app

RUNNER = CliRunner()


def _merge(*args) -> tuple[int, str]:
    result = RUNNER.invoke(app, ["merge", *map(str, args)])
    return result.exit_code, result.stderr.strip()


@pytest.mark.parametrize("value, reason", [
    (b"NaN", "not valid JSON"), (b"Infinity", "not valid JSON"), (b"-Infinity", "not valid JSON"),
    (b"1 2", "expected ',' or '}'"), (b"nan", "not valid JSON"), (b"1e400", "infinity"),
    (b"01", "leading zero"), (b'"abc"', "has ts 'abc'"), (b"null", "has ts None"),
    (b"1e30", "has ts 1e+30"), (b"true", "has ts True"),
])
def test_a_bad_ts_in_the_report_names_the_event(tmp_path, value, reason):
    viz, proton = sample_rank(tmp_path)
    replace_once(viz, VIZ_TS, b'"ts": ' + value)
    out = tmp_path / "out.json"
    one_error_line(*_merge(viz, proton, "-o", out), str(viz), "traceEvents[3]", reason,
                   "Perfetto cannot load it", "re-record the report")
    assert not out.exists()


@pytest.mark.parametrize("old, new, fragment", [
    (b'"dur": 2.982856965095232', b'"dur": NaN', "traceEvents[3]"),
    (b'"name": "builtins.hash"', b'"name": "builtins.hash", "args": {"v": Infinity}', "traceEvents[3]"),
])
def test_nan_anywhere_and_a_broken_ts_are_refused(tmp_path, old, new, fragment):
    viz, proton = sample_rank(tmp_path)
    replace_once(viz, old, new)
    one_error_line(*_merge(viz, proton, "-o", tmp_path / "out.json"), str(viz), fragment)


@pytest.mark.parametrize("new", [
    b'"name": "x: NaN, Infinity, \\"ts\\": 1 2"',  # the words inside a string
    b'"name": "builtins.hash", "args": {"ts": "a string ts in args"}',  # a nested ts
])
def test_look_alikes_inside_strings_or_args_merge(tmp_path, new):
    viz, proton = sample_rank(tmp_path)
    replace_once(viz, b'"name": "builtins.hash"', new)
    code, err = _merge(viz, proton, "-o", tmp_path / "out.json")
    assert code == 0, err
    json.loads((tmp_path / "out.json").read_bytes())  # valid JSON


def _without_metadata(viz, tail: bytes):
    data = viz.read_bytes()
    viz.write_bytes(data[:data.index(b'], "viztracer_metadata"')] + tail)
    age(viz)


@pytest.mark.parametrize("tail", [b"]}\n", b'], "displayTimeUnit": "ns", "otherData": {"a": {"b": [1]}}}'])
def test_a_report_without_metadata_is_copied_once(tmp_path, tail):
    viz, proton = sample_rank(tmp_path)
    events = sum(1 for e in json.loads(viz.read_bytes())["traceEvents"] if e["ph"] != "M")
    _without_metadata(viz, tail)
    out = tmp_path / "out.json"
    code, err = _merge(viz, proton, "-o", out, "--offset-us", "150926783.883")
    assert code == 0, err
    merged = json.loads(out.read_bytes())  # before the fix: the events twice, "]}" between
    host = [e for e in merged["traceEvents"] if e.get("pid") == 762 and e["ph"] != "M"]
    assert len(host) == events
    assert "viztracer_metadata" not in merged


def test_a_cut_report_without_metadata_is_truncated(tmp_path):
    viz, proton = sample_rank(tmp_path)
    data = viz.read_bytes()
    viz.write_bytes(data[:data.index(b'], "viztracer_metadata"') - 5000])
    age(viz)
    one_error_line(*_merge(viz, proton, "-o", tmp_path / "out.json", "--offset-us", "5"),
                   str(viz), "truncated")


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("position", ["viztracer", "gpu"])
def test_a_merged_file_fed_back_is_refused(tmp_path, compress, position):
    viz, proton = sample_rank(tmp_path)
    merged = tmp_path / ("m.json.gz" if compress else "m.json")
    assert _merge(viz, proton, "-o", merged)[0] == 0
    age(merged)
    inputs = [merged, proton] if position == "viztracer" else [viz, merged]
    code, err = _merge(*inputs, "-o", tmp_path / "again.json", "--offset-us", "5")
    assert code == 1 and len(err.splitlines()) == 1, err
    if position == "viztracer" or not compress:  # a gz merged file is known once read
        assert "is a merged trace written by tokentrace merge" in err and "original" in err, err
    assert "VizTracer < 1.0" not in err
    assert not (tmp_path / "again.json").exists()


def test_names_that_are_not_utf8_merge_per_rank_and_combined(tmp_path):
    viz, proton = sample_rank(tmp_path)
    replace_once(viz, b'"name": "builtins.hash"', b'"name": "bad \xff\xfe name"')
    code, err = _merge(tmp_path, "--combine", "-o", tmp_path / "all.json")
    assert code == 0, err
    # issue 31: copied raw, the bytes made the merged file invalid JSON; they become U+FFFD
    merged = (tmp_path / "all.json").read_bytes()
    assert '"name": "bad \ufffd\ufffd name"'.encode() in merged
    merged.decode("utf-8")
    with open_trace(tmp_path / "all.json", warn=False) as trace:
        assert trace.query("SELECT COUNT(*) AS n FROM slice WHERE name GLOB 'bad *'").n[0] >= 1


def test_a_gzip_report_with_nan_is_refused(tmp_path):
    viz, proton = sample_rank(tmp_path)
    replace_once(viz, VIZ_TS, b'"ts": NaN')
    packed = tmp_path / "s-TP0.viztracer.json.gz"
    packed.write_bytes(gzip.compress(viz.read_bytes()))
    viz.unlink()
    age(packed)
    one_error_line(*_merge(packed, proton, "-o", tmp_path / "o.json"), str(packed), "traceEvents[3]")


# The first X event (traceEvents[3]) of the sample's TP0 report, its dur, and the start of the
# next event: what the dur and framing edits replace.
VIZ_DUR = b'"dur": 2.982856965095232'
NEXT_EVENT = b'{"pid": 762, "tid": 762, "ts": 72271928.674'


@pytest.mark.parametrize("value, reason", [
    (b"1 2", "not valid JSON"), (b'"abc"', "has dur 'abc'"), (b"null", "has dur None"),
    (b"-1.5", "has dur -1.5"), (b"-0.5e3", "has dur -500.0"), (b"true", "has dur True"),
    (b"Infinity", "not valid JSON"), (b"NaN", "not valid JSON"), (b"1 ", None),
])
def test_a_bad_dur_in_the_report_names_the_event(tmp_path, value, reason):
    viz, proton = sample_rank(tmp_path)
    replace_once(viz, VIZ_DUR, b'"dur": ' + value + (b"2" if value == b"1 " else b""))
    out = tmp_path / "out.json"
    fragments = ["traceEvents[3]", "Perfetto cannot load it"] + ([reason] if reason else [])
    one_error_line(*_merge(viz, proton, "-o", out), str(viz), *fragments)
    assert not out.exists()


@pytest.mark.parametrize("between, index, reason", [
    (b"}", 3, "not valid JSON"), (b"} ", 3, "not valid JSON"), (b"}\n", 3, "not valid JSON"),
    (b"}\r\n\t", 3, "not valid JSON"), (b"}x, ", 3, "not valid JSON"),
    (b"}, x, ", 3, "not valid JSON"), (b"}, , ", 3, "not valid JSON"),
    (b"}, 5, ", 4, "is not an event object: 5"), (b'}, "abc", ', 4, "is not an event object: abc"),
    (b"},\n  ", None, None),  # other blanks around the comma: legal
])
def test_broken_framing_between_events_names_the_event(tmp_path, between, index, reason):
    viz, proton = sample_rank(tmp_path)
    replace_once(viz, b"}, " + NEXT_EVENT, between + NEXT_EVENT)
    out = tmp_path / "out.json"
    if index is None:
        code, err = _merge(viz, proton, "-o", out)
        assert code == 0, err
        return
    one_error_line(*_merge(viz, proton, "-o", out), str(viz), f"traceEvents[{index}]", reason,
                   "Perfetto cannot load it", "re-record the report")
    assert not out.exists()


def test_a_missing_comma_after_a_metadata_event_is_refused(tmp_path):
    viz, proton = sample_rank(tmp_path)
    data = viz.read_bytes()
    at = data.index(b'"ph": "M"', data.index(b'"ph": "M"') + 1)  # the second metadata event
    close = data.index(b"}}, {", at)
    viz.write_bytes(data[:close] + b"}} {" + data[close + 5:])
    age(viz)
    out = tmp_path / "out.json"
    one_error_line(*_merge(viz, proton, "-o", out), str(viz), "traceEvents[1]", "not valid JSON")
    assert not out.exists()


@pytest.mark.parametrize("new", [
    b'"name": "f}{g} {h}, {i \\"dur\\": 1 2, \\"ts\\": NaN }\\n{"',  # look-alikes in a name
    b'"name": "builtins.hash", "args": {"s": "}{", "dur": "1 2", "n": {"dur": -1}, "l": [{}, {}]}',
    b'"name": "builtins.hash", "args": {"a": {"b": {}}}, "id": 3',  # nested objects mid-event
])
def test_framing_and_dur_look_alikes_inside_strings_or_args_merge(tmp_path, new):
    viz, proton = sample_rank(tmp_path)
    replace_once(viz, b'"name": "builtins.hash"', new)
    out = tmp_path / "out.json"
    code, err = _merge(viz, proton, "-o", out)
    assert code == 0, err
    merged = json.loads(out.read_bytes())  # valid JSON, the edited event kept
    assert sum(1 for e in merged["traceEvents"] if e.get("ts") == 72271921.765 + 0) <= 1
