"""Reader of torch-profiler (Kineto) chrome traces: the GPU side that vLLM and SGLang record.

Layout (torch >= 2.4, measured on ``../shared/traces/engine_kineto*``): ``baseTimeNanoseconds``
at the top level (``unix = base + ts``), ``ts`` in µs with ns decimals; GPU activity has ``cat``
``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` / ``gpu_user_annotation`` with ``pid`` = device and
``tid`` = stream; the host side has ``cpu_op``, ``user_annotation``, ``cuda_runtime``,
``cuda_driver`` (and ``python_function`` with ``with_stack=True``) with the OS pid and tid; an
``ac2g`` flow links a runtime call to each GPU activity with its correlation id: one ``s`` on
the call, one ``f`` per activity (a ``cudaGraphLaunch`` launches every kernel of its replay).

The trace is laid out the way the merge lays out Proton 3.9 (a :class:`ProtonTrace` of dialect
``kineto``), so the writer, the alignment and the queries serve both: host threads become the
process's CPU lanes, each stream a GPU lane, each stream's annotations a lane of their own (they
span kernels, and kernels may not nest in a lane). Every ``f`` gets its own copy of its ``s``,
so every GPU activity keeps its arrow from the call that launched it (Perfetto keeps one ``f``
per id). ``python_function`` events are kept apart (:attr:`KinetoTrace.python`): they are the
host timeline when no VizTracer report is there (:mod:`tokentrace.sources.kineto_host`), else
they go to lanes of their own.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path

import orjson

from tokentrace.errors import InputError
from tokentrace.sources.detect import TraceKind, mismatch_message
from tokentrace.sources.event_fields import check_phases, check_times
from tokentrace.sources.fileio import read_all
from tokentrace.sources.proton import GPU_LANE_BASE, GRAPH_LANE_BASE, ProtonEvent, ProtonTrace, json_error
from tokentrace.units import us_list_to_ns

DIALECT = "kineto"
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
ANNOTATION_CATEGORY = "gpu_user_annotation"
PYTHON_CATEGORY = "python_function"
FLOW_CATEGORY = "ac2g"
_PYTHON_LANE_BASE = 50000  # python_function lanes, after the runtime/op lanes


@dataclasses.dataclass
class KinetoGpu(ProtonTrace):
    """The GPU side of a torch-profiler trace, laid out as Proton's.

    Attributes:
        replay_correlations: correlation ids of the ``cudaGraphLaunch`` calls: their kernels
            are replayed from a CUDA graph, not launched one by one.
    """

    replay_correlations: frozenset = frozenset()

    def kernels(self) -> list[tuple[str, int, int, int]]:
        """The kernels launched one by one (the estimator's evidence; a graph's replayed
        kernels have no launch call of their own), as :meth:`ProtonTrace.kernels`."""
        replayed = self.replay_correlations
        rows = [(e.raw.get("name", ""), e.ts_ns, e.ts_ns + e.dur_ns, e.lane) for e in self.events
                if e.ph == "X" and e.raw.get("cat") == "kernel"
                and _correlation(e.raw) not in replayed]
        return sorted(rows, key=lambda row: (row[1], row[2]))


def _correlation(raw: dict):
    args = raw.get("args")
    return args.get("correlation") if isinstance(args, dict) else None


@dataclasses.dataclass
class KinetoTrace:
    """One torch-profiler trace, read.

    Attributes:
        gpu: everything but the ``python_function`` events kept apart, as the merge's GPU side.
        python: the raw ``python_function`` events when asked to keep them apart, else empty.
        host_pid: the OS pid of the profiled process (the pid of its host events).
        thread_names: host tid -> thread name (Kineto's ``thread <tid> (<process>)``).
        launch_tid: the host thread with the most runtime calls: the launching thread.
    """

    gpu: KinetoGpu
    python: list[dict]
    host_pid: int | None
    thread_names: dict[int, str]
    launch_tid: int | None


def read_kineto(path: Path, python_apart: bool = False) -> KinetoTrace:
    """Reads a torch-profiler chrome trace (plain or gzip).

    Args:
        path: the ``.trace.json[.gz]`` file.
        python_apart: keep the ``python_function`` events out of the GPU side (the caller
            makes them the host timeline).

    Raises:
        InputError: missing, not JSON, truncated, not a torch-profiler trace, or without GPU
            activity.
    """
    doc = _load(path)
    base = doc.get("baseTimeNanoseconds")
    base_ns = base if isinstance(base, int) and not isinstance(base, bool) else None
    events = doc["traceEvents"]
    _check_events(path, events)
    python = [e for e in events if e.get("cat") == PYTHON_CATEGORY] if python_apart else []
    kept = [e for e in events if e["ph"] != "M" and not (python_apart and e.get("cat") == PYTHON_CATEGORY)]
    layout = _Lanes(events)
    replays = frozenset(_correlation(e) for e in kept if e.get("name") == "cudaGraphLaunch"
                        and e.get("cat") == "cuda_runtime")
    trace = KinetoGpu([path], DIALECT, base_ns, [], layout.names, replay_correlations=replays)
    lanes = [layout.lane(e) for e in kept]
    check_phases(path, events, kept)
    times = [e.get("ts") for e in kept]
    check_times(path, events, kept, "ts", times, required=True)
    starts = us_list_to_ns(times)
    times = [e.get("dur", 0) if e["ph"] == "X" else 0 for e in kept]
    check_times(path, events, kept, "dur", times, required=True)
    durations = us_list_to_ns(times)
    parsed = list(map(ProtonEvent, [e["ph"] for e in kept], lanes, starts, durations, kept))
    trace.events = _pair_flows(trace, parsed)
    if not any(e.ph == "X" and e.raw.get("cat") in GPU_CATEGORIES for e in trace.events):
        raise InputError(
            f"{path}: the torch-profiler trace has no GPU kernels; record with "
            "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] and run GPU work inside it"
        )
    return KinetoTrace(trace, python, layout.host_pid, layout.thread_names, layout.launch_tid(kept))


def _load(path: Path) -> dict:
    raw = read_all(path)
    if raw.lstrip().startswith(b"["):
        raise InputError(mismatch_message(path, TraceKind.KINETO, TraceKind.CHROME_ARRAY))
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise json_error(path, raw, exc) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError(f"{path}: no 'traceEvents' list; this is not a torch-profiler chrome trace")
    if isinstance(doc.get("tokentrace"), dict):
        raise InputError(mismatch_message(path, TraceKind.KINETO, TraceKind.MERGED))
    if "viztracer_metadata" in doc:
        raise InputError(f"{path}: this is a VizTracer report, not a torch-profiler trace; "
                         "pass it as the rank's VizTracer report")
    return doc


def _check_events(path: Path, events: list) -> None:
    for index, raw in enumerate(events):
        if type(raw) is not dict or "ph" not in raw:
            raise InputError(f"{path}: traceEvents[{index}] is not an event: {str(raw)[:80]}")


class _Lanes:
    """Input ``(pid, tid)`` -> lane, with the lane names; host lanes first, then annotation
    lanes, then GPU stream lanes, each in order of first appearance."""

    def __init__(self, events: list[dict]) -> None:
        self.names: dict[int, str] = {}
        self._lanes: dict[tuple, int] = {}
        self._counts: dict[int, int] = defaultdict(int)
        self.thread_names: dict[int, str] = {}
        self.host_pid: int | None = None
        for raw in events:
            if raw.get("ph") == "M" and raw.get("name") == "thread_name" and isinstance(raw.get("tid"), int):
                self.thread_names.setdefault(raw["tid"], str(raw.get("args", {}).get("name", "")).strip())
            elif raw.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver") and isinstance(raw.get("pid"), int):
                self.host_pid = raw["pid"] if self.host_pid is None else self.host_pid

    def lane(self, raw: dict) -> int:
        cat, pid, tid = raw.get("cat"), raw.get("pid"), raw.get("tid")
        if cat in GPU_CATEGORIES or (cat == FLOW_CATEGORY and raw.get("ph") == "f" and pid != self.host_pid):
            key, base = ("gpu", pid, tid), GPU_LANE_BASE
        elif cat == ANNOTATION_CATEGORY:
            key, base = ("annotation", pid, tid), GRAPH_LANE_BASE
        elif cat == PYTHON_CATEGORY:
            key, base = ("python", pid, tid), _PYTHON_LANE_BASE
        elif pid == self.host_pid:
            key, base = ("cpu", pid, tid), 0
        else:  # the profiler's own spans, instants and buffer overheads: one lane
            key, base = ("profiler", None, None), 0
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = base + self._counts[base]
            self._counts[base] += 1
            self.names[lane] = self._name(key)
        return lane

    def _name(self, key: tuple) -> str:
        role, pid, tid = key
        device = f"GPU {pid} " if isinstance(pid, int) and pid > 0 else ""
        if role == "gpu":
            return f"{device}GPU Stream {tid}" if not device else f"{device}Stream {tid}"
        if role == "annotation":
            return f"{device}GPU Stream {tid} annotations" if not device else f"{device}Stream {tid} annotations"
        if role == "python":
            return f"Python thread {tid} (torch profiler)"
        if role == "cpu":
            return f"CPU Thread {tid} (torch profiler)"
        return "torch profiler"

    def launch_tid(self, events: list[dict]) -> int | None:
        counts: dict[int, int] = defaultdict(int)
        for raw in events:
            if raw.get("cat") == "cuda_runtime" and raw.get("pid") == self.host_pid:
                counts[raw.get("tid")] += 1
        return max(counts, key=lambda tid: (counts[tid], -tid)) if counts else None


def _pair_flows(trace: ProtonTrace, events: list[ProtonEvent]) -> list[ProtonEvent]:
    """One ``s`` copy per ``f`` of its id, placed where the ``s`` was; unpaired ends dropped
    (counted in ``trace.unpaired_flows``)."""
    ends: dict[object, list[ProtonEvent]] = defaultdict(list)
    starts: dict[object, ProtonEvent] = {}
    for event in events:
        if event.raw.get("cat") != FLOW_CATEGORY:
            continue
        if event.ph == "f":
            ends[event.raw.get("id")].append(event)
        elif event.ph == "s":
            starts.setdefault(event.raw.get("id"), event)
    out: list[ProtonEvent] = []
    for event in events:
        if event.raw.get("cat") != FLOW_CATEGORY or event.ph not in ("s", "f"):
            out.append(event)
            continue
        flow_id = event.raw.get("id")
        if event.ph == "f":
            if starts.get(flow_id) is None:
                trace.unpaired_flows += 1
            else:
                out.append(event)
            continue
        if starts.get(flow_id) is not event:
            trace.unpaired_flows += 1  # a second s of one id: its f events pair with the first
            continue
        finishes = ends.get(flow_id, [])
        if not finishes:
            trace.unpaired_flows += 1
        for finish in finishes:
            finish.flow_pair = trace.n_flows
            out.append(ProtonEvent("s", event.lane, event.ts_ns, 0, event.raw, trace.n_flows))
            trace.n_flows += 1
    return out
