"""Issue 13, items 2 and 7: Proton and torch-profiler field types are checked on read; a bad one
is one line naming the file, the event index and what to do (no traceback, no event silently at
t = 0), and an array-form Chrome trace is called what it is."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from support.hostile import PROTON_SCOPE_TS, age, one_error_line, replace_once, sample_rank
from tokentrace.cli import app

RUNNER = CliRunner()


def _merge(*args) -> tuple[int, str]:
    result = RUNNER.invoke(app, ["merge", *map(str, args)])
    return result.exit_code, result.stderr.strip()


@pytest.mark.parametrize("old, new, fragment", [
    (PROTON_SCOPE_TS, b'"ts":null', "has ts None"),
    (PROTON_SCOPE_TS, b'"ts":"abc"', "has ts 'abc', not a number"),
    (PROTON_SCOPE_TS, b'"ts":1e30', "beyond what Perfetto holds"),
    (PROTON_SCOPE_TS, b'"ts":true', "has ts True"),
    (b'"tid":0,"ts":73370.249', b'"tid":"abc","ts":73370.249', "has tid 'abc'"),
    (b'"dur":7462.704', b'"dur":-5', "negative dur"),
    (b'"dur":7462.704', b'"dur":"7"', "has dur '7'"),
])
def test_a_bad_proton_field_names_the_event(tmp_path, old, new, fragment):
    viz, proton = sample_rank(tmp_path)
    replace_once(proton, old, new)
    out = tmp_path / "out.json"
    one_error_line(*_merge(viz, proton, "-o", out), str(proton), "traceEvents[6] (X scope 'decode_step')",
                   fragment, "re-record the trace")
    assert not out.exists()


def test_a_kernel_without_ts_is_refused_not_put_at_zero(tmp_path):
    viz, proton = sample_rank(tmp_path)
    doc = json.loads(proton.read_bytes())
    index = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel")
    del doc["traceEvents"][index]["ts"]
    proton.write_text(json.dumps(doc))
    age(proton)
    one_error_line(*_merge(viz, proton, "-o", tmp_path / "out.json"), f"traceEvents[{index}] (X kernel",
                   "has no ts")


def test_a_bad_torch_profiler_ts_names_the_event(tmp_path, shared_traces):
    import gzip

    source = shared_traces / "engine_kineto" / "engk-TP0.trace.json.gz"
    doc = json.loads(gzip.decompress(source.read_bytes()))
    index = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel")
    doc["traceEvents"][index]["ts"] = "abc"
    trace = tmp_path / "k-TP0.trace.json"
    trace.write_text(json.dumps(doc))
    age(trace)
    one_error_line(*_merge(trace, "-o", tmp_path / "out.json"), str(trace), f"traceEvents[{index}] (X kernel",
                   "has ts 'abc'")


def test_an_array_form_chrome_trace_is_not_called_hatchet(tmp_path):
    viz, proton = sample_rank(tmp_path)
    events = json.loads(proton.read_bytes())["traceEvents"]
    proton.write_text(json.dumps(events))  # the JSON Array Format: a bare list of events
    age(proton)
    code, err = _merge(viz, proton, "-o", tmp_path / "out.json")
    one_error_line(code, err, str(proton), "array form", '{"traceEvents": [...]}')
    assert "hatchet" not in err


def test_a_real_hatchet_file_is_still_named(tmp_path):
    viz, proton = sample_rank(tmp_path)
    proton.write_text('[{"children": [], "frame": {"name": "ROOT", "type": "function"}, "metrics": {}}]')
    age(proton)
    one_error_line(*_merge(viz, proton, "-o", tmp_path / "out.json"), "hatchet", 'data="trace"')


def _read_small_pieces(path):
    """read_proton with the piecewise threshold and piece size made tiny (the real ones are
    32 MiB and 4 MiB)."""
    from tokentrace.options import RawOptions
    from tokentrace.sources import proton
    from tokentrace.sources.backend import reading

    with reading(RawOptions(piecewise_bytes=1000, piece_bytes=20_000)):
        return proton.read_proton([path])


def _columns(trace):
    kept = ("name", "cat", "args", "id", "bp")
    return [(e.ph, e.lane, e.ts_ns, e.dur_ns, e.flow_pair, {k: e.raw.get(k) for k in kept}) for e in trace.events]


def test_a_large_proton_file_read_in_pieces_is_the_same_trace(tmp_path):
    from tokentrace.sources.proton import read_proton

    _, proton = sample_rank(tmp_path)
    whole = read_proton([proton])
    pieces = _read_small_pieces(proton)
    assert _columns(pieces) == _columns(whole)
    assert (pieces.n_flows, pieces.lane_names, pieces.base_ns, pieces.dialect) == \
        (whole.n_flows, whole.lane_names, whole.base_ns, whole.dialect)
    kernels = [e.raw for e in pieces.events if e.raw.get("cat") == "kernel"]
    assert len({id(raw) for raw in kernels}) < len(kernels) / 5  # launches share their rest


def test_a_cut_inside_a_string_falls_back_to_the_whole_file(tmp_path):
    from tokentrace.sources.backend import recording_passes
    from tokentrace.sources.proton import read_proton

    _, proton = sample_rank(tmp_path)
    proton.write_bytes(proton.read_bytes().replace(b'"cat":"kernel"', b'"cat":"kernel","note":"},{"'))
    with recording_passes() as passes:
        pieces = _read_small_pieces(proton)
    assert _columns(pieces) == _columns(read_proton([proton]))
    assert [p.piecewise for p in passes] == [True, False]  # the pieces did not parse: read whole


def test_a_bad_event_deep_in_a_large_file_is_named_by_its_index(tmp_path):
    _, proton = sample_rank(tmp_path)
    doc = json.loads(proton.read_bytes())
    index = len(doc["traceEvents"]) - 100
    doc["traceEvents"][index]["ts"] = "abc"
    proton.write_text(json.dumps(doc, separators=(",", ":")))
    from tokentrace.errors import InputError

    with pytest.raises(InputError, match=rf"traceEvents\[{index}\] .* has ts 'abc'"):
        _read_small_pieces(proton)
