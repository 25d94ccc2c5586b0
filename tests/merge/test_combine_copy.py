"""``--combine`` copies a rank whose host axis and ids it can keep (:mod:`tokentrace.merge.host_span`,
:mod:`tokentrace.merge.part`) and rewrites the others: both ways must give the same events."""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections import Counter

import orjson
import pytest

from support.hostile import age, sample_rank
from support.trace_files import load_json
from tokentrace.catalog import open_trace
from tokentrace.merge import merge
from tokentrace.merge.host_span import LinkStartsUnreadable, copy_file, copy_host_span
from tokentrace.merge.ids import FRESH_ID_START
from tokentrace.options import MergeOptions, RawOptions
from tokentrace.sources._raw import find_link_starts
from tokentrace.sources.backend import reading
from tokentrace.sources.links import combined_link_id

STATS_LOST = "SELECT name, value FROM stats WHERE severity IN ('error', 'data_loss') AND value > 0"
# the rank instant's args that hold ids (which differ between the two ways by design)
_ID_ARGS = ("host_pid", "host_main_tid", "gpu_pid")


def _events(path) -> Counter:
    """The file's events with processes and threads by name, times in integer ns."""
    doc = load_json(path)
    process, thread = {}, {}
    for event in doc["traceEvents"]:  # the last name given wins, as in Perfetto
        if event["ph"] == "M" and event["name"] == "process_name":
            process[event["pid"]] = event["args"]["name"]
        elif event["ph"] == "M" and event["name"] == "thread_name":
            thread[(event["pid"], event["tid"])] = event["args"]["name"]
    found = Counter()
    for event in doc["traceEvents"]:
        if event["ph"] == "M":
            continue
        pid, tid = event.get("pid"), event.get("tid")
        key = {k: v for k, v in event.items() if k not in ("pid", "tid", "ts", "dur")}
        if event.get("name") == "tokentrace.rank":
            key["args"] = {k: v for k, v in event["args"].items() if k not in _ID_ARGS}
        found[(process.get(pid), thread.get((pid, tid)), orjson.dumps(key, option=orjson.OPT_SORT_KEYS),
               round(event.get("ts", 0) * 1000), round(event.get("dur", 0) * 1000))] += 1
    return found


def _names(path) -> Counter:
    """(process name, thread name) of every thread that holds an event."""
    doc = load_json(path)
    process = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    thread = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
              if e["ph"] == "M" and e["name"] == "thread_name"}
    return Counter((process.get(e["pid"]), thread.get((e["pid"], e["tid"]))) for e in doc["traceEvents"] if e["ph"] != "M")


def _combined(folder, out, rewrite=False):
    options = MergeOptions(combine=True, raw=RawOptions(copy_ranks=not rewrite))
    result = merge([folder], out / "all.merged.json", options)
    assert not [p.name for p in out.iterdir() if p.name.endswith(".part")]  # no part left behind
    return result


def test_copied_ranks_hold_the_events_of_rewritten_ranks(sample_t39, tmp_path):
    copied = _combined(sample_t39, tmp_path / "copied")
    rewritten = _combined(sample_t39, tmp_path / "rewritten", rewrite=True)
    records = load_json(copied.combined)["tokentrace"]["ranks"]
    # copied: the host keeps its pids (the rewritten file gives fresh ones)
    assert all(r["host_pid"] < FRESH_ID_START for r in records)
    assert all(r["host_pid"] >= FRESH_ID_START for r in load_json(rewritten.combined)["tokentrace"]["ranks"])
    assert _events(copied.combined) == _events(rewritten.combined)
    assert _names(copied.combined) == _names(rewritten.combined)
    assert sum(_events(copied.combined).values()) > 100_000


@pytest.mark.slow
def test_a_rank_whose_host_ids_another_rank_holds_is_rewritten(tmp_path):
    folder = tmp_path / "in"
    sample_rank(folder, tag="TP0", source="TP0")
    sample_rank(folder, tag="TP1", source="TP0")  # the same pids and tids
    result = _combined(folder, tmp_path / "out")
    host_pids = [r["host_pid"] for r in load_json(result.combined)["tokentrace"]["ranks"]]
    assert host_pids[0] < FRESH_ID_START <= host_pids[1]
    names = _names(result.combined)
    assert names[("TP0 host", "MainThread")] == names[("TP1 host", "MainThread")] > 10_000


@pytest.mark.filterwarnings("ignore:TP1. clocks of the two files disagree")  # its Proton anchor stayed
@pytest.mark.slow
def test_a_rank_whose_anchor_is_later_is_shifted(tmp_path):
    folder = tmp_path / "in"
    sample_rank(folder, tag="TP0", source="TP0")
    viz, _ = sample_rank(folder, tag="TP1", source="TP1")
    doc = json.loads(viz.read_bytes())
    doc["viztracer_metadata"]["baseTimeNanoseconds"] += 5_000_000  # 5 ms later: another host's clock
    viz.write_text(json.dumps(doc))
    age(viz)
    result = _combined(folder, tmp_path / "out")
    combined = load_json(result.combined)
    first_host = min(e["ts"] for e in doc["traceEvents"] if "ts" in e and e["ph"] != "M")
    tp1 = next(r for r in combined["tokentrace"]["ranks"] if r["rank"] == "TP1")
    host = [e["ts"] for e in combined["traceEvents"] if e.get("pid") == tp1["host_pid"] and e["ph"] != "M"]
    assert min(host) == pytest.approx(first_host + 5_000, abs=2e-3)  # rounded to ns
    assert tp1["host_pid"] >= FRESH_ID_START  # rewritten


def _link(pid: int, ts: float, scope_id: int, **extra) -> dict:
    return {"name": "viztracer->proton", "cat": "tokenspeed.proton", "ph": "s", "ts": ts, "id": scope_id,
            "bp": "e", "pid": pid, "tid": pid, **extra}


def _rank_with_links(folder, tag: str, nested: bool) -> None:
    """A small real rank with two link starts (one nested in ``args`` with ``nested``)."""
    viz, proton = sample_rank(folder / f"src-{tag}", source=tag)
    doc = json.loads(viz.read_bytes())
    doc["traceEvents"] = doc["traceEvents"][:3000]
    pid, ts = doc["traceEvents"][0]["pid"], doc["traceEvents"][5]["ts"]
    extra = {"args": {"inner": {"k": 1}}} if nested else {}
    doc["traceEvents"][4:4] = [_link(pid, ts, 7, **extra), _link(pid, ts, 8)]
    (folder / f"s-{tag}.viztracer.json").write_text(json.dumps(doc))
    proton.rename(folder / f"s-{tag}.proton.chrome_trace")
    for kind in ("viztracer.json", "proton.chrome_trace"):
        age(folder / f"s-{tag}.{kind}")
    shutil.rmtree(folder / f"src-{tag}")


@pytest.mark.filterwarnings("ignore:.*link starts .* have no Proton scope")  # the sample has no scope ids
@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.slow
def test_link_starts_get_the_rank_namespace_either_way(tmp_path, nested):
    folder = tmp_path / "in"
    _rank_with_links(folder, "TP0", nested=False)
    _rank_with_links(folder, "TP1", nested=nested)
    result = _combined(folder, tmp_path / "out")
    doc = load_json(result.combined)
    starts = sorted(e["id"] for e in doc["traceEvents"] if e.get("name") == "viztracer->proton")
    assert starts == sorted(combined_link_id(i, s) for i in (0, 1) for s in (7, 8))
    # a nested start cannot be namespaced in place: that rank is rewritten (fresh host pid)
    assert [r["host_pid"] >= FRESH_ID_START for r in doc["tokentrace"]["ranks"]] == [False, nested]


def test_copy_host_span_namespaces_flat_link_starts_only(tmp_path):
    events = [{"pid": 1, "tid": 1, "ts": 1.0, "ph": "X", "dur": 1.0, "name": "f", "args": {"s": '"viztracer->proton"'}},
              _link(1, 2.0, 3), {"pid": 1, "ph": "i", "ts": 3.0, "name": "viztracer->proton", "cat": "other"}]
    data = json.dumps(events)[1:-1].encode()
    path = tmp_path / "span"
    path.write_bytes(b"[" + data + b"]")
    written = []
    with open(path, "rb") as source:
        span = (1, 1 + len(data))
        found = copy_host_span(source.fileno(), span, find_link_starts(path, span), 2, written.append)
    out = json.loads(b"[" + b"".join(written) + b"]")
    assert found == {3}
    assert out[1]["id"] == combined_link_id(2, 3) and out[0] == events[0] and out[2] == events[2]
    nested = json.dumps([_link(1, 2.0, 3, args={"a": {"b": 1}})])[1:-1].encode()
    path.write_bytes(nested)
    with open(path, "rb") as source, pytest.raises(LinkStartsUnreadable):
        copy_host_span(source.fileno(), (0, len(nested)), find_link_starts(path, (0, len(nested))), 0,
                       written.append)


@pytest.mark.parametrize("kernel", [True, False], ids=["copy_file_range", "refused"])
def test_the_kernel_copy_writes_the_bytes_the_pieces_do(tmp_path, monkeypatch, kernel):
    """With the output file given, the bytes around the link starts go by copy_file_range (or,
    where the kernel refuses it, through this process): the file holds what the pieces say, the
    writes before and after it in place."""
    events = [{"pid": 1, "tid": 1, "ts": float(i), "ph": "X", "dur": 1.0, "name": f"f{i}"} for i in range(3000)]
    events[1000:1000] = [_link(1, 5.0, 3), _link(1, 6.0, 4)]
    data = json.dumps(events)[1:-1].encode()
    path = tmp_path / "span"
    path.write_bytes(b"HEAD[" + data + b"]TAIL")
    span = (5, 5 + len(data))
    written = []
    with open(path, "rb") as source:
        found = copy_host_span(source.fileno(), span, find_link_starts(path, span), 1, written.append)
    calls = []

    def kernel_copy(*args, real=os.copy_file_range):
        calls.append(args[2])
        if not kernel:
            raise OSError(18, "Invalid cross-device link")
        return real(*args)
    monkeypatch.setattr("os.copy_file_range", kernel_copy)
    with open(path, "rb") as source, open(tmp_path / "out", "wb") as out:
        out.write(b"before,")
        starts = find_link_starts(path, span)
        assert copy_host_span(source.fileno(), span, starts, 1, out.write, out) == found == {3, 4}
        out.write(b",between,")
        copy_file(source.fileno(), out.write, out)
        out.write(b",after")
    expected = b"before," + b"".join(written) + b",between," + path.read_bytes() + b",after"
    assert (tmp_path / "out").read_bytes() == expected
    # three ranges around the starts and the file; refused: each copy tries once, then reads
    assert len(calls) == (4 if kernel else 2)
    starts = [e for e in json.loads(b"[" + b"".join(written) + b"]") if e["name"] == "viztracer->proton"]
    assert [e["id"] for e in starts] == [combined_link_id(1, 3), combined_link_id(1, 4)]


def _two_ranks(tmp_path, edit) -> object:
    """The sample's two ranks, ``edit(doc, tag)`` applied to each report, combined."""
    folder = tmp_path / "in"
    for tag in ("TP0", "TP1"):
        viz, _ = sample_rank(folder, tag=tag, source=tag)
        doc = json.loads(viz.read_bytes())
        text = edit(doc, tag)
        viz.write_text(text if isinstance(text, str) else json.dumps(doc))
        age(viz)
    return _combined(folder, tmp_path / "out")


@pytest.mark.slow
def test_a_report_of_blanks_alone_gives_a_valid_combined_file(tmp_path):
    def blanks(doc, tag):
        if tag == "TP1":
            meta = json.dumps(doc["viztracer_metadata"])
            return '{"traceEvents": [  \n  ], "viztracer_metadata": ' + meta + "}"
    result = _two_ranks(tmp_path, blanks)
    assert load_json(result.combined)["traceEvents"]  # valid JSON: no comma for the empty host
    assert result.ranks[1].combined_part is None  # (dropped once the combined file is written)
    with open_trace(result.combined, warn=False) as trace:
        assert trace.query(STATS_LOST).empty


@pytest.mark.parametrize("edit", ["unnamed pid", "escaped name"])
@pytest.mark.slow
def test_ranks_the_copy_cannot_keep_as_they_are_are_rewritten(tmp_path, edit):
    def change(doc, tag):
        events = doc["traceEvents"]
        if edit == "unnamed pid":  # events on a pid no metadata event names: maybe another rank's
            events += [{"pid": 99999, "tid": 99999, "ts": events[5]["ts"], "ph": "X", "dur": 1.0, "name": "x"}]
            return None
        events.insert(4, _link(events[0]["pid"], events[5]["ts"], 7))  # as Go's encoder writes it
        return json.dumps(doc).replace('"viztracer->proton"', '"viztracer-\\u003eproton"')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = _two_ranks(tmp_path, change)
    records = load_json(result.combined)["tokentrace"]["ranks"]
    assert all(r["host_pid"] >= FRESH_ID_START for r in records)  # both rewritten
    with open_trace(result.combined, warn=False) as trace:
        assert trace.query(STATS_LOST).empty


def test_a_link_start_like_object_nested_in_a_list_is_not_taken_for_one(tmp_path):
    nested = json.dumps([{"pid": 1, "tid": 1, "ts": 1.0, "ph": "X", "dur": 1.0, "name": "f",
                          "args": {"calls": [1, _link(1, 2.0, 5), 2]}}])[1:-1].encode()
    path = tmp_path / "span"
    path.write_bytes(nested)
    with open(path, "rb") as source, pytest.raises(LinkStartsUnreadable):
        copy_host_span(source.fileno(), (0, len(nested)), find_link_starts(path, (0, len(nested))), 0, [].append)



_SPAN_EVENT = b'{"pid": 7, "tid": 8, "ts": 1.0, "ph": "X", "dur": 1.0, "name": "f"}'


@pytest.mark.parametrize(("event", "copyable"), [
    (_SPAN_EVENT, True),
    (b'{"pid":7,"tid":8,"ts":1.0,"ph":"X","dur":1.0,"name":"f"}', True),  # orjson's layout
    (b'{"pid" : 7 , "tid":\n8}', True),  # blanks around the separators
    (b'{"pid": 77, "tid": 8, "ts": 1.0}', False),  # a pid no metadata event names
    (b'{"pid": 7, "tid": 9, "ts": 1.0}', False),  # a tid no metadata event names
    (b'{"pid": 7, "tid": 87}', False),  # a known value's digits are no known value
    (b'{"pid": 7, "tid": 8, "name": "a\\u003eb"}', False),  # a printable character escaped
    (b'{"pid": 7, "tid": 8, "name": "a\\u0007b"}', True),  # a control character must be
    (b'{"pid": 7, "tid": 8, "name": "a\\\\b", "scope_id": 3}', True),  # other escapes, other ids
])
def test_copyable_span_tells_spans_it_may_copy_as_they_are(tmp_path, event, copyable):
    options = RawOptions(span_scan_bytes=4096)  # many chunks: the fault may lie on any edge
    for at in (0, 1000, 4096 - 250, 4096 - 10, 8000):
        events = [_SPAN_EVENT] * 120
        events.insert(at // len(_SPAN_EVENT), event)
        data = b", ".join(events)
        path = tmp_path / "span"
        path.write_bytes(b"[" + data + b"]")
        with reading(options):
            found = find_link_starts(path, (1, 1 + len(data)), ({7}, {8}))
        assert found.copyable is copyable, at


@pytest.mark.parametrize("scan_bytes", [97, 300, 1000, 1 << 20])
def test_every_link_start_of_a_span_is_found_once_whatever_its_chunks(tmp_path, scan_bytes):
    """The span's check and its search for link starts share chunks that overlap: a start cut
    by a chunk's edge, or lying in the overlap, is found once."""
    events = []
    for i in range(60):
        events.append({"pid": 7, "tid": 8, "ts": 1.0 + i, "ph": "X", "dur": 0.5, "name": "f" * (i % 13)})
        if i % 3 == 0:
            events.append(_link(7, 1.5 + i, 100 + i))
    data = json.dumps(events)[1:-1].encode()
    path = tmp_path / "span"
    path.write_bytes(b"[" + data + b"]")
    span = (1, 1 + len(data))
    with reading(RawOptions(span_scan_bytes=scan_bytes)):
        found = find_link_starts(path, span, ({7}, {7, 8}))  # a link start's tid is its pid
    assert found.copyable and not found.unparsed
    assert [p.scope_id for p in found.places] == list(range(100, 160, 3))
    assert all(data[p.start - 1:p.end - 1].startswith(b"{") for p in found.places)


_ONE_THREAD = b'{"pid": 7, "tid": 7, "ts": 1.0, "ph": "X", "dur": 1.0, "name": "f"}'


@pytest.mark.parametrize(("event", "copyable"), [
    (_ONE_THREAD, True),
    (b'{"pid": 7, "tid": 77, "ts": 1.0}', False),  # a tid no metadata event names
    (b'{"pid":8,"tid":7}', False),  # a pid, in orjson's layout
    (b'{"pid": 7, "tid": 7, "ph": "s", "id": 5, "name": "viztracer->proton"}', True),  # another key's value
    (b'{"pid": 7, "tid": 7, "args": {"scope_id": 3}}', True),
])
def test_a_span_of_one_thread_is_checked_as_one_of_several(tmp_path, event, copyable):
    """A process of one traced thread names the same id for both keys: the check looks for
    unknown values after any key first, and key by key only where that finds one."""
    for at in (0, 1000, 4096 - 250, 8000):
        events = [_ONE_THREAD] * 120
        events.insert(at // len(_ONE_THREAD), event)
        data = b", ".join(events)
        path = tmp_path / "span"
        path.write_bytes(b"[" + data + b"]")
        with reading(RawOptions(span_scan_bytes=4096)):
            found = find_link_starts(path, (1, 1 + len(data)), ({7}, {7}))
        assert found.copyable is copyable, at
