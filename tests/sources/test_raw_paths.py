"""The raw-byte path against its fallback: every trace merged (``--combine``) with the fast path
(``RawOptions()``) and with the full parse (``RawOptions(fast_path=False)``) gives the same merged
files, event for event (the fallback writes host events in orjson's layout, so the files are
compared parsed), and the same index of each report.

The quick variant runs tiny hand-written reports in the layouts the fast path must handle; the
slow one every trace set committed under tests/data/."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import orjson
import pytest

from support.hostile import age
from support.paths import DATA
from tokentrace.errors import TokentraceWarning
from tokentrace.merge import merge
from tokentrace.options import AlignMode, MergeOptions, RawOptions
from tokentrace.sources._raw import index_report
from tokentrace.sources.backend import reading
from tokentrace.sources.event_fields import load_lenient

FAST, FALLBACK = RawOptions(), RawOptions(fast_path=False)
BASE = 1_000_000_000_000
SETS = ("sample_t39_tp2", "sample_t36_tp2", "sim_busy_t36", "compile_proton_cut",
        "diff_serve_engine/before", "diff_serve_engine/after")


def _merged(inputs: list[Path], out: Path, raw: RawOptions, **options) -> dict[str, object]:
    """Every file the merge writes into ``out``, parsed (the same paths for both runs)."""
    for old in out.glob("*"):
        old.unlink()
    merge(inputs, out / "all.merged.json", MergeOptions(combine=True, raw=raw, **options))
    return {p.name: load_lenient(p.read_bytes()) for p in sorted(out.iterdir())}


def _same_index(report: Path, warned_alike: bool) -> None:
    with reading(FAST):
        fast = index_report(report)
    with reading(FALLBACK):
        parsed = index_report(report)
    assert not parsed.streamed
    kept = [load_lenient(b"{" + i.kept + b"}") for i in (fast, parsed)]
    assert kept[0] == kept[1]
    ignored = {"streamed": True, "kept": b""} | ({} if warned_alike else {"not_utf8": 0})
    assert dataclasses.replace(fast, **ignored) == dataclasses.replace(parsed, **ignored)


def _without_warnings(doc: dict) -> dict:
    for record in doc.get("tokentrace", {}).get("ranks", [doc.get("tokentrace", {})]):
        record.pop("warnings", None)
    return doc


def _assert_paths_agree(inputs: list[Path], reports: list[Path], out: Path, warned_alike: bool = True,
                        **options) -> None:
    out.mkdir(exist_ok=True)
    fast = _merged(inputs, out, FAST, **options)
    fallback = _merged(inputs, out, FALLBACK, **options)
    assert fast.keys() == fallback.keys() and "all.merged.json" in fast
    for name in fast:
        if not warned_alike:
            _without_warnings(fast[name]), _without_warnings(fallback[name])
        assert fast[name] == fallback[name], name
    for report in reports:
        _same_index(report, warned_alike)


# --- tiny hand-written reports (quick) ---------------------------------------------------------

def _host(extra: dict | None = None) -> list[dict]:
    events = [{"ph": "M", "pid": 7, "tid": 7, "name": "process_name", "args": {"name": "MainProcess"}},
              {"ph": "M", "pid": 7, "tid": 8, "name": "thread_name", "args": {"name": "worker"}}]
    for i in range(200):
        event = {"pid": 7, "tid": 7 + i % 2, "ts": 100.5 + i, "ph": "X", "dur": 0.75, "name": f"f{i % 7}",
                 "cat": "FEE"}
        if extra and i % 3 == 0:
            event["args"] = extra
        events.append(event)
    events.append({"name": "viztracer->proton", "cat": "tokenspeed.proton", "ph": "s", "ts": 150.0, "id": 3,
                   "bp": "e", "pid": 7, "tid": 7})
    return events


def _report(events: list[dict], layout: str) -> bytes:
    meta = {"version": "1.0.4", "baseTimeNanoseconds": BASE - 5_000_000, "overflow": False}
    doc = {"traceEvents": events, "viztracer_metadata": meta, "file_info": {"files": {"a.py": ["x", 1]}}}
    if layout == "compact":
        return orjson.dumps(doc)
    if layout == "no metadata key":
        del doc["viztracer_metadata"]
    if layout == "metadata first":
        doc = {"viztracer_metadata": meta, "traceEvents": events}
    return json.dumps(doc).encode()


LAYOUTS = ("spaced", "compact", "gzip", "no metadata key", "metadata first", "braces in args", "not UTF-8")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tiny_reports_merge_alike_on_both_paths(tmp_path, layout):
    extra = {"func_args": {"cfg": "{'lr': 0.1}, {'x': [1]}"}} if layout == "braces in args" else None
    raw = _report(_host(extra), layout)
    if layout == "not UTF-8":
        raw = raw.replace(b'"name": "f3"', b'"name": "f3\xff\xfe"')
    name = "t-TP0.viztracer.json" + (".gz" if layout == "gzip" else "")
    viz = tmp_path / name
    viz.write_bytes(gzip.compress(raw) if layout == "gzip" else raw)
    kernels = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 200007, "ts": 5_000 + 10.0 * i,
                "dur": 5.0} for i in range(50)]
    proton = tmp_path / "t-TP0.proton.chrome_trace"
    proton.write_text(json.dumps({"displayTimeUnit": "ns", "traceEvents": kernels, "baseTimeNanoseconds": BASE}))
    age(viz), age(proton)
    options = {"align": AlignMode.OFFSET, "offset_us": 0.0} if layout == "no metadata key" else {}
    # both paths replace bytes that are not UTF-8 alike, and count and warn alike
    _assert_paths_agree([viz, proton], [viz], tmp_path / "out", **options)


@pytest.mark.parametrize("raw", [FAST, FALLBACK], ids=["fast path", "fallback"])
def test_names_that_are_not_utf8_are_replaced_with_a_warning_on_both_paths(tmp_path, raw):
    report = _report(_host(), "compact").replace(b'"name":"f3"', b'"name":"f3\xff\xfe"')
    assert b"\xff\xfe" in report
    viz = tmp_path / "t-TP0.viztracer.json"
    viz.write_bytes(report)
    kernels = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 200007, "ts": 5_000 + 10.0 * i,
                "dur": 5.0} for i in range(50)]
    proton = tmp_path / "t-TP0.proton.chrome_trace"
    proton.write_text(json.dumps({"displayTimeUnit": "ns", "traceEvents": kernels, "baseTimeNanoseconds": BASE}))
    age(viz), age(proton)
    with pytest.warns(TokentraceWarning, match="not UTF-8"):  # before: the fallback said nothing
        merge([viz, proton], tmp_path / "out.json", MergeOptions(raw=raw))
    assert "f3\ufffd\ufffd" in (tmp_path / "out.json").read_text(encoding="utf-8")


# --- every committed trace set (slow) ----------------------------------------------------------

@pytest.mark.filterwarnings("ignore::tokentrace.errors.TokentraceWarning")  # estimated offsets
@pytest.mark.slow
@pytest.mark.parametrize("name", SETS)
def test_committed_traces_merge_alike_on_both_paths(tmp_path, name):
    folder = DATA / name
    reports = sorted(folder.glob("*.viztracer.json*"))
    assert reports
    _assert_paths_agree([folder], reports, tmp_path / "out")
