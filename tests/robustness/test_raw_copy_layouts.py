"""The raw copy's checks on the layouts VizTracer really writes: ``}, {`` with the standard
library, ``},{`` with orjson installed, ``log_func_args`` reprs holding ``}``, and file names
Python's json escapes as lone surrogates. Sound reports must stream without the whole-report
parse (its memory is the report's), and bad values must still be named."""

from __future__ import annotations

import gzip
import json

import orjson
import pytest
from typer.testing import CliRunner

from support.hostile import one_error_line, sample_rank, small_rank
from tokentrace.cli import app
from tokentrace.sources._raw import copy_events

RUNNER = CliRunner()


def _copy(path):
    out: list = []
    info = copy_events(path, out.append)
    return info, b"".join(bytes(piece) for piece in out)


def _write(path, doc, compact: bool):
    path.write_bytes(orjson.dumps(doc) if compact else json.dumps(doc).encode())
    return path


@pytest.mark.parametrize("compact", [False, True])
def test_sound_reports_stream_without_the_whole_parse(tmp_path, compact):
    viz, _ = small_rank(tmp_path, events=3000)
    doc = json.loads(viz.read_bytes())
    for event in doc["traceEvents"]:  # log_func_args: reprs holding braces in every event
        if event.get("ph") == "X":
            event["args"] = {"func_args": {"cfg": "{'lr': 0.1}, {'x': [1]}"}, "return_value": "None"}
    _write(viz, doc, compact)
    info, body = _copy(viz)
    assert info.streamed and not info.checked_whole  # no whole-report parse
    assert orjson.loads(b"[" + body + b"]") == doc["traceEvents"]
    assert info.first_ts_ns == min(round(e["ts"] * 1000) for e in doc["traceEvents"] if "ts" in e)


@pytest.mark.parametrize("value", [b"1 2", b"NaN", b'"abc"', b"null"])
def test_a_bad_dur_in_orjson_layout_is_named(tmp_path, value):
    viz, proton = small_rank(tmp_path, events=3000)
    doc = json.loads(viz.read_bytes())
    raw = orjson.dumps(doc)
    index = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("ph") == "X")
    old = orjson.dumps(doc["traceEvents"][index])
    new = old.replace(b'"dur":' + orjson.dumps(doc["traceEvents"][index]["dur"]), b'"dur":' + value)
    assert new != old
    viz.write_bytes(raw.replace(old, new, 1))
    out = tmp_path / "out.json"
    result = RUNNER.invoke(app, ["merge", str(viz), str(proton), "-o", str(out)])
    one_error_line(result.exit_code, result.stderr.strip(), str(viz), f"traceEvents[{index}]")
    assert not out.exists()


def test_a_key_ending_in_s_before_ts_is_not_taken_for_it(tmp_path):
    events = [{"pid": 7, "tid": 7, "ts": 1000.5 + i, "ph": "X", "dur": 1.0, "name": "f", "cat": "FEE"}
              for i in range(20)]
    events[5] = {"pid": 7, "tid": 7, "bytes": 3, "ts": 1005.5, "ph": "X", "dur": 1.0, "name": "g"}
    path = _write(tmp_path / "r.viztracer.json",
                  {"traceEvents": events, "viztracer_metadata": {"version": "1.1.1"}}, compact=False)
    info, _ = _copy(path)
    assert info.first_ts_ns == 1_000_500


@pytest.mark.slow
def test_a_lone_surrogate_escape_merges(tmp_path):
    viz, proton = sample_rank(tmp_path)
    doc = json.loads(viz.read_bytes())
    doc["traceEvents"][3]["name"] = "load (/data/caf\udce9.py:3)"
    for event in doc["traceEvents"][4:2000]:  # braces in strings: suspects, then the whole check
        if event.get("ph") == "X":
            event["args"] = {"cfg": "}, {"}
    viz.write_text(json.dumps(doc))  # ensure_ascii: "\udce9" written as an escape
    out = tmp_path / "out.json"
    result = RUNNER.invoke(app, ["merge", str(viz), str(proton), "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    assert out.stat().st_size > 0
    combined = tmp_path / "all.json"  # copies the rank's events: the escape as written
    result = RUNNER.invoke(app, ["merge", str(tmp_path), "--combine", "-o", str(combined)])
    assert result.exit_code == 0, result.stderr
    assert b'"load (/data/caf\\udce9.py:3)"' in combined.read_bytes()
    rewritten = tmp_path / "all.json.gz"  # a gzip combined file rewrites: U+FFFD for the surrogate
    result = RUNNER.invoke(app, ["merge", str(tmp_path), "--combine", "-o", str(rewritten)])
    assert result.exit_code == 0, result.stderr
    assert "load (/data/caf\ufffd" in gzip.decompress(rewritten.read_bytes()).decode("utf-8")
