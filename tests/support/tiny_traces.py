"""Tiny merged traces written inline by a test, loaded into the real embedded engine: the SQL
diff tests of the `tokentrace.*` modules (tests/sql/modules/). Times in µs as written (Chrome
JSON), ns as read back (`US`). The layout is the merge's (docs/merged-format.md, as
tests/sql/traces/edge_cases.json): per rank a host process (VizTracer frames) and a GPU process
(Proton lanes, kernels, scopes) and a `tokentrace.rank` instant on the GPU process."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from tokentrace.catalog import open_trace

US = 1000


def rank(tag: str, host: int, gpu: int, *, tp: int | None = 0, dp: int | None = None,
         main_tid: int | None = None, **args) -> list[dict]:
    """The metadata of one merged rank: host process ``host`` (main thread ``host``), GPU process
    ``gpu`` (CPU scope lane gpu+1, streams gpu+2 and gpu+3, the merge's lane gpu+4) and its
    ``tokentrace.rank`` instant; ``args`` override the instant's fields."""
    record = {"rank": tag, "dp": dp, "cp": None, "tp": tp, "stage": "", "host_pid": host,
              "host_main_tid": host if main_tid is None else main_tid, "gpu_pid": gpu,
              "align_method": "anchors", "offset_ns": 0, "offset_lo_ns": None, "offset_hi_ns": None,
              "anchor_consistent": None, "viz_overflow": False, "viz_first_ts_ns": 0,
              "proton_dialect": "3.9", "proton_kernels": 0, "proton_flows": 0,
              "time_origin_unix_ns": 1_000_000_000_000} | args
    return [
        {"ph": "M", "name": "process_name", "pid": host, "args": {"name": f"{tag} host"}},
        {"ph": "M", "name": "thread_name", "pid": host, "tid": host, "args": {"name": "MainThread"}},
        {"ph": "M", "name": "process_name", "pid": gpu, "args": {"name": f"{tag} Proton (GPU)"}},
        {"ph": "M", "name": "thread_name", "pid": gpu, "tid": gpu + 1, "args": {"name": "CPU Thread 0"}},
        {"ph": "M", "name": "thread_name", "pid": gpu, "tid": gpu + 2, "args": {"name": "GPU Stream 7"}},
        {"ph": "M", "name": "thread_name", "pid": gpu, "tid": gpu + 3, "args": {"name": "GPU Stream 8"}},
        {"ph": "M", "name": "thread_name", "pid": gpu, "tid": gpu + 4, "args": {"name": "tokentrace"}},
        {"ph": "i", "s": "t", "name": "tokentrace.rank", "cat": "tokentrace", "pid": gpu, "tid": gpu + 4,
         "ts": 0, "args": record},
    ]


def frame(name: str, ts: float, dur: float, pid: int, tid: int | None = None) -> dict:
    """A VizTracer slice (a Python frame `f (x.py:1)` or a C call) on a host thread."""
    return {"ph": "X", "name": name, "cat": "FEE", "pid": pid, "tid": pid if tid is None else tid,
            "ts": ts, "dur": dur}


def kernel(name: str, ts: float, dur: float, gpu: int, stream: int = 2, cat: str = "kernel",
           **args) -> dict:
    """A GPU slice on stream lane gpu+stream (2 or 3)."""
    event = {"ph": "X", "name": name, "cat": cat, "pid": gpu, "tid": gpu + stream, "ts": ts, "dur": dur}
    return event | ({"args": args} if args else {})


def scope(name: str, ts: float, dur: float, gpu: int) -> dict:
    """A Proton CPU scope on the GPU process's scope lane."""
    return {"ph": "X", "name": name, "cat": "scope", "pid": gpu, "tid": gpu + 1, "ts": ts, "dur": dur}


def flow(flow_id: int, gpu: int, at: float, kernel_ts: float, stream: int = 2) -> list[dict]:
    """A Proton launch->kernel flow from the scope lane at ``at`` into the kernel at kernel_ts."""
    return [{"ph": "s", "name": "launch->kernel", "cat": "flow", "id": flow_id, "pid": gpu, "tid": gpu + 1,
             "ts": at},
            {"ph": "f", "bp": "e", "name": "launch->kernel", "cat": "flow", "id": flow_id, "pid": gpu,
             "tid": gpu + stream, "ts": kernel_ts}]


def thread_name(pid: int, tid: int, name: str) -> dict:
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}


@contextmanager
def tiny_engine(folder: Path, events: list[dict], name: str = "tiny.json"):
    """The events as one JSON trace in ``folder``, opened in the embedded engine."""
    path = Path(folder) / name
    path.write_text(json.dumps({"displayTimeUnit": "ns", "traceEvents": events}), encoding="utf-8")
    with open_trace(path, warn=False) as engine:
        yield engine


def rows(engine, module: str, sql: str) -> list[tuple]:
    """``sql`` after ``INCLUDE PERFETTO MODULE tokentrace.<module>``, as a list of tuples (NULL
    -> None, integral numbers as int)."""
    frame_ = engine.query(f"INCLUDE PERFETTO MODULE tokentrace.{module}; {sql}")
    return [tuple(_plain(value) for value in row) for row in frame_.itertuples(index=False)]


def _plain(value):
    if pd.isna(value):
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
