"""A large torch-profiler trace is read from its chunks a piece at a time (column-wise, args kept
serialized); the result must be the trace the whole-file read gives, and a bad event in a later
piece must be named as the whole-file read names it (file, index in traceEvents, what to do).

On the shared H200 traces (``engine_kineto*``, 49 and 108 MB of JSON as torch writes it), with
the piecewise threshold and the piece size made small so that every file is cut into dozens of
pieces and every chunk boundary falls at a different place in an event.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import orjson
import pytest

from support.hostile import age
from support.paths import SHARED_TRACES
from tokentrace.errors import InputError
from tokentrace.options import RawOptions
from tokentrace.sources import proton_pieces
from tokentrace.sources.backend import reading, recording_passes
from tokentrace.sources.exact_times import has_long_times, quote_long_times
from tokentrace.sources.kineto import read_kineto
from tokentrace.sources.kineto_host import host_from_python
from tokentrace.sources.kineto_links import with_arrows

STACK = SHARED_TRACES / "engine_kineto_stack" / "engs-TP0.trace.json.gz"
WITH_VIZ = SHARED_TRACES / "engine_kineto" / "engk-TP0.trace.json.gz"
needs_shared = pytest.mark.skipif(not STACK.is_file(), reason="shared Kineto traces not present")
PIECE_BYTES = 1 << 20  # the real ones: 32 MiB threshold, 4 MiB pieces, 4 MiB chunks
CHUNK_BYTES = 50_000


@pytest.fixture
def reads():
    """``read(path, python_apart, piecewise)``; ``read.passes`` records each pass over the file
    as ``[read in pieces, number of pieces]`` (two passes: the pieces did not parse), as the
    reader reports them (:func:`tokentrace.sources.backend.recording_passes`)."""
    passes: list[list] = []

    def read(path: Path, python_apart: bool, piecewise: bool, piece_bytes: int = PIECE_BYTES):
        raw = RawOptions(chunk_bytes=CHUNK_BYTES, piecewise_bytes=1000 if piecewise else 1 << 40,
                         piece_bytes=piece_bytes)
        passes.clear()
        with reading(raw), recording_passes() as recorded:
            try:
                return read_kineto(path, python_apart=python_apart)
            finally:
                passes.extend([p.piecewise, p.pieces] for p in recorded)

    read.passes = passes
    return read


def _json(value) -> bytes:
    """``value`` as the merge writes it (a dict and its serialized Fragment write the same)."""
    return orjson.dumps({"v": value}, option=orjson.OPT_SORT_KEYS)


def _events(trace) -> list[tuple]:
    return [(e.ph, e.lane, e.ts_ns, e.dur_ns, e.flow_pair,
             _json({key: e.raw[key] for key in ("name", "cat", "args", "bp") if key in e.raw}))
            for e in with_arrows(trace.gpu.events, trace.gpu.launch_pairs)]


def _summary(trace) -> tuple:
    gpu = trace.gpu
    return (gpu.dialect, gpu.base_ns, list(gpu.lane_names.items()), gpu.n_flows, gpu.unpaired_flows, gpu.launch_pairs,
            gpu.replay_correlations, gpu.kernels(), trace.host_pid, trace.thread_names, trace.launch_tid)


def _host(trace) -> tuple:
    host = host_from_python(trace.python, trace.host_pid, trace.thread_names)
    tids = {tid: tid for tid in host.tids}
    return (host.tids, host.names, host.starts_ns, host.ends_ns, host.n_clipped,
            bytes(b"".join(host.serialise(0, trace.host_pid, tids))))


@needs_shared
@pytest.mark.parametrize(("path", "python_apart"), [(WITH_VIZ, False), (STACK, True)],
                         ids=["engine_kineto", "engine_kineto_stack"])
@pytest.mark.slow
def test_pieces_give_the_whole_file_trace(reads, path, python_apart):
    whole = reads(path, python_apart, piecewise=False)
    assert reads.passes == [[False, 1]]
    pieces = reads(path, python_apart, piecewise=True)
    assert len(reads.passes) == 1 and reads.passes[0][0] is True  # no fallback to the whole file
    assert reads.passes[0][1] > 40  # cut into pieces of ~1 MiB
    assert _summary(pieces) == _summary(whole)
    assert _events(pieces) == _events(whole)
    assert len(pieces.python) == len(whole.python) == (229_640 if python_apart else 0)
    if python_apart:
        assert _host(pieces) == _host(whole)
    # what a piece keeps of an event: no times or ids (they are columns), args serialized
    kernel = next(e.raw for e in pieces.gpu.events if e.raw.get("cat") == "kernel")
    assert set(kernel) == {"ph", "cat", "name", "args"} and isinstance(kernel["args"], orjson.Fragment)
    assert not any(e.ph in "sf" for e in pieces.gpu.events)  # the arrows are pairs, no events
    finishes = {id(e.raw) for e in with_arrows(pieces.gpu.events, pieces.gpu.launch_pairs) if e.ph == "f"}
    assert len(finishes) == 1  # every flow end shares one payload


@pytest.fixture(scope="module")
def torch_text() -> bytes:
    if not WITH_VIZ.is_file():
        pytest.skip("shared Kineto traces not present")
    return gzip.decompress(WITH_VIZ.read_bytes())


# a kernel as torch writes it; the i-th match is the i-th kernel of traceEvents
_KERNEL = re.compile(rb'"cat": "kernel", "name": "(?P<name>[^"]*)", "pid": \d+, "tid": \d+,\s*'
                     rb'"ts": (?P<ts>[0-9.]+), "dur": (?P<dur>[0-9.]+)')


def _kernels(text: bytes) -> list[tuple[int, re.Match]]:
    """``(index in traceEvents, its text)`` of every kernel."""
    indices = [i for i, e in enumerate(orjson.loads(text)["traceEvents"]) if e.get("cat") == "kernel"]
    found = list(_KERNEL.finditer(text))
    assert len(found) == len(indices) > 50_000
    return list(zip(indices, found))


def _edited(text: bytes, *edits: tuple[int, int, bytes]) -> bytes:
    """``text`` with each ``(start, end, new)`` span replaced."""
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def _write(tmp_path: Path, text: bytes) -> Path:
    path = tmp_path / "k-TP0.trace.json"
    path.write_bytes(text)
    return age(path)  # not 'still being written'


def _error(read, path: Path, piecewise: bool) -> str:
    with pytest.raises(InputError) as caught:
        read(path, False, piecewise)
    return str(caught.value)


@pytest.mark.slow
def test_a_bad_event_in_a_later_piece_is_named_by_its_index(reads, tmp_path, torch_text):
    index, kernel = _kernels(torch_text)[-100]  # in the last of ~48 pieces
    path = _write(tmp_path, _edited(torch_text, (*kernel.span("ts"), b'"abc"')))
    message = _error(reads, path, piecewise=True)
    assert len(reads.passes) == 1 and reads.passes[0][0] is True and reads.passes[0][1] > 40
    name = kernel["name"].decode()
    assert message.startswith(f"{path}: traceEvents[{index}] (X kernel '{name}') has ts 'abc', not a number")
    assert message.endswith("re-record the trace, or repair or delete that event")
    assert message == _error(reads, path, piecewise=False)


@pytest.mark.parametrize("later", ["ts", "not an event"])
@pytest.mark.slow
def test_a_later_piece_can_hold_the_error_the_whole_read_names(reads, tmp_path, torch_text, later):
    # the whole-file read checks every event's phase, then every ts, then every dur: a bad ts
    # in the last piece is named before a bad dur in the first, a non-event before either
    kernels = _kernels(torch_text)
    (_, early), (late, kernel) = kernels[50], kernels[-100]
    edits = [(*early.span("dur"), b"-5")]
    if later == "ts":
        edits.append((*kernel.span("ts"), b"null"))
        expected = f"traceEvents[{late}] (X kernel"
    else:  # the event's "ph" key renamed: an object that is no event
        start = torch_text.index(b'"ph"', torch_text.rfind(b"{", 0, kernel.start()))
        edits.append((start, start + 4, b'"PH"'))
        expected = f"traceEvents[{late}] is not an event"
    path = _write(tmp_path, _edited(torch_text, *edits))
    message = _error(reads, path, piecewise=True)
    assert len(reads.passes) == 1 and reads.passes[0][0] is True and reads.passes[0][1] > 40
    assert expected in message and "negative dur" not in message
    assert message == _error(reads, path, piecewise=False)
    # and alone, the bad dur of the first piece is what both name
    path = _write(tmp_path, _edited(torch_text, edits[0]))
    message = _error(reads, path, piecewise=True)
    assert "negative dur (-5 µs)" in message and message == _error(reads, path, piecewise=False)


@pytest.mark.slow
def test_a_cut_inside_a_string_falls_back_to_the_whole_file(reads, tmp_path, torch_text):
    # a '}, {' (what a cut looks for) in a string, where the first cut is looked for: the first
    # piece ends inside the string and does not parse
    _, kernel = _kernels(torch_text)[20_000]
    brace = torch_text.rfind(b"{", 0, kernel.start())
    text = _edited(torch_text, (brace + 1, brace + 1, b' "note": "}, {",'))
    path = _write(tmp_path, text)
    # the offsets in the text the pieces are cut from: long start times are quoted first
    seen = quote_long_times(text) if has_long_times(text[:1 << 20]) else text
    brace = seen.find(b' "note": "}, {",') - 1
    array_start = proton_pieces._EVENTS_KEY.search(seen).end()
    pieces = reads(path, False, piecewise=True, piece_bytes=brace + 1 - array_start)
    assert [piecewise for piecewise, _ in reads.passes] == [True, False]
    assert reads.passes[0][1] == 0  # the first piece did not parse
    assert _events(pieces) == _events(reads(path, False, piecewise=False))


@pytest.mark.slow
def test_a_truncated_large_file_is_reported_as_the_whole_read_reports_it(reads, tmp_path, torch_text):
    path = _write(tmp_path, torch_text[:len(torch_text) * 2 // 3])
    message = _error(reads, path, piecewise=True)
    # the pieces ran out before the array's end; the whole-file read then fails before any event
    assert len(reads.passes) == 1 and reads.passes[0][0] is True and reads.passes[0][1] > 25
    assert "JSON ends early" in message and message == _error(reads, path, piecewise=False)


def test_the_array_end_is_found_before_lists_in_later_members():
    """torch may write ``deviceProperties`` (a list) after ``traceEvents``: the events' ``]`` is
    the first of the last ``]`` whose rest closes the object, not the list's (which would fail
    the last piece and read the file twice)."""
    from tokentrace.sources.proton_pieces import array_end

    text = (b'{"traceEvents": [{"ph": "X", "args": {"l": [1]}}], "traceName": "run[0]", '
            b'"deviceProperties": [{"id": 0, "sms": [1, 2]}], "distributedInfo": {"r": 0}}')
    end, rest = array_end(text)
    assert text[:end + 1].endswith(b'[1]}}]')
    assert rest == {"traceName": "run[0]", "deviceProperties": [{"id": 0, "sms": [1, 2]}],
                    "distributedInfo": {"r": 0}}
