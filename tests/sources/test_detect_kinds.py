"""Sniffing: torch-profiler traces of every Kineto generation are told apart from Proton and
VizTracer files by their first bytes, and files that are no profiler trace are named."""

from __future__ import annotations

import gzip
import json

import pytest

from tokentrace.errors import InputError
from tokentrace.sources.detect import (
    TraceKind,
    described,
    not_analyzable_message,
    require_kind,
    sniff,
)


def _write(tmp_path, name, document, gz=False):
    path = tmp_path / name
    text = json.dumps(document, indent=1).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


def _kernel(cat, flow_cat):
    return [
        {"ph": "X", "cat": cat, "name": "void k<128>(int)", "pid": 0, "tid": "stream 7",
         "ts": 10.5, "dur": 2, "args": {"correlation": 42}},
        {"ph": "f", "id": 42, "pid": 0, "tid": "stream 7", "ts": 10.5, "cat": flow_cat,
         "name": flow_cat, "bp": "e"},
    ]


@pytest.mark.parametrize(("cat", "flow"), [
    ("Kernel", "async_gpu"),  # 2021-2022: capitalised categories
    ("kernel", "async_cpu_to_gpu"),  # 2023
    ("kernel", "ac2g"),  # today
])
def test_kineto_with_trace_events_first(tmp_path, cat, flow):
    path = _write(tmp_path, "x.json.gz", {"traceEvents": _kernel(cat, flow), "traceName": "x"}, gz=True)
    assert sniff(path) is TraceKind.KINETO


@pytest.mark.parametrize("cat", ["Runtime", "Memcpy", "Memset", "Operator", "Python"])
def test_capitalised_host_categories(tmp_path, cat):
    events = [{"ph": "X", "cat": cat, "name": "n", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]
    assert sniff(_write(tmp_path, "t.json", {"traceEvents": events})) is TraceKind.KINETO


def test_kineto_keys_in_any_order(tmp_path):
    document = {"displayTimeUnit": "ms", "traceEvents": [], "distributedInfo": {"rank": 1}}
    assert sniff(_write(tmp_path, "t.json", document)) is TraceKind.KINETO


def test_proton_38_is_not_kineto(tmp_path):
    # triton <= 3.8: lower-case `kernel` only, no pid
    events = [{"ph": "X", "cat": "kernel", "name": "add_kernel", "tid": 0, "ts": 1, "dur": 1,
               "args": {"call_stack": ["ROOT", "add_kernel"]}}]
    path = _write(tmp_path, "a.proton.chrome_trace", {"displayTimeUnit": "ns", "traceEvents": events})
    assert sniff(path) is TraceKind.PROTON


def test_viztracer_is_not_kineto(tmp_path):
    events = [{"ph": "X", "cat": "FEE", "name": "f (a.py:1)", "pid": 5, "tid": 5, "ts": 1, "dur": 1}]
    path = _write(tmp_path, "a.viztracer.json", {"traceEvents": events, "viztracer_metadata": {}})
    assert sniff(path) is TraceKind.VIZTRACER


@pytest.mark.parametrize("first", ["schema", "nodes"])
def test_execution_trace_refused_by_name(tmp_path, first):
    body = {"schema": "1.0.1", "pid": 7, "time": "2023-07-14 11:53:07", "start_ts": 62,
            "nodes": [{"name": "aten::empty", "id": 5, "inputs": [], "outputs": []}]}
    if first == "nodes":
        body = {"nodes": body.pop("nodes"), **body}
    path = _write(tmp_path, "et.json.gz", body, gz=True)
    assert sniff(path) is TraceKind.EXECUTION_TRACE
    message = not_analyzable_message(path, TraceKind.EXECUTION_TRACE)
    assert "a PyTorch Execution Trace, not a profiler trace" in message
    assert "torch.profiler.profile(" in message and "\n" not in message
    with pytest.raises(InputError, match="PyTorch Execution Trace, not a profiler trace"):
        require_kind(path, TraceKind.KINETO)


def test_messages_read_as_english(tmp_path):
    assert described(TraceKind.UNKNOWN) == "not a JSON trace"
    assert described(TraceKind.EMPTY) == "an empty file"
    assert described(TraceKind.VIZTRACER) == "a VizTracer report"
    message = not_analyzable_message(tmp_path / "x.json", TraceKind.UNKNOWN)
    assert "a not a" not in message and ": not a JSON trace;" in message
