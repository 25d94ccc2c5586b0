"""Reader of torch-profiler (Kineto) chrome traces: the GPU side that vLLM and SGLang record.

Layout (torch >= 2.4, measured on ``../shared/traces/engine_kineto*``): ``baseTimeNanoseconds``
at the top level (``unix = base + ts``), ``ts`` in µs with ns decimals; GPU activity has ``cat``
``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` / ``gpu_user_annotation`` with ``pid`` = device and
``tid`` = stream; the host side has ``cpu_op``, ``user_annotation``, ``cuda_runtime``,
``cuda_driver`` (and ``python_function`` with ``with_stack=True``) with the OS pid and tid.
Every GPU activity's ``args.correlation`` names the runtime or driver call that launched it (a
``cudaGraphLaunch`` / ``hipGraphLaunch`` launches every kernel of its replay, all with its id).

Traces of every Kineto generation are read alike (``../shared/traces/peers``): the 2021-2022
capitalised categories (``Kernel``, ``Runtime``, ``Memcpy`` ...) are renamed to today's
(:data:`~tokentrace.sources.kineto_links.CATEGORY_NAMES`), and the launch flows, ``ac2g`` today, ``async_cpu_to_gpu`` (2023) or
``async_gpu`` (2022), or none at all (sampled traces), are not copied: each GPU activity gets an
arrow of its own from the call with its correlation id (:mod:`.kineto_links`). Kineto
writes one ``s`` per call and no ``s`` for a ROCm graph launch, so the ids are the evidence, the
flows only a drawing of it. ``cuda_sync`` events (Stream Wait Event, Event Sync) that the
arrows of sync calls point at get a lane per stream of their own.

The trace is laid out the way the merge lays out Proton 3.9 (a :class:`ProtonTrace` of dialect
``kineto``), so the writer, the alignment and the queries serve both: host threads become the
process's CPU lanes, each stream a GPU lane, each stream's annotations a lane of their own (they
span kernels, and kernels may not nest in a lane). Every ``f`` gets its own copy of its ``s``,
so every GPU activity keeps its arrow from the call that launched it (Perfetto keeps one ``f``
per id: each arrow gets its own id). ``python_function`` events are kept apart (:attr:`KinetoTrace.python`): they are the
host timeline when no VizTracer report is there (:mod:`tokentrace.sources.kineto_host`), else
they go to lanes of their own.

A file over ``piecewise_bytes`` (:func:`tokentrace.sources.backend.current`) is read from its chunks a piece at a time
(:func:`~tokentrace.sources.proton_pieces.stream_document`), column-wise: neither its text nor a
dict per event outlives its piece; an event keeps what the merged file needs (its keys but
``ts``, ``dur``, ``pid``, ``tid``, ``id``; ``args`` as JSON text; events without args share
one dict). A bad
event is the one the whole-file read names (each check over all events, then the next), so a
later piece may hold it. When the pieces do not parse, the file is read whole.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from itertools import repeat
from pathlib import Path

import orjson

from tokentrace.errors import InputError
from tokentrace.sources import backend
from tokentrace.sources.detect import TraceKind, mismatch_message
from tokentrace.sources.event_fields import check_phases, check_times
from tokentrace.sources.exact_times import checkable, exact_chunks, has_long_times, quote_long_times
from tokentrace.sources.fileio import iter_chunks, read_all
from tokentrace.sources.kineto_host import PythonCalls
from tokentrace.sources.kineto_links import (
    CALL_CATEGORIES,
    GPU_CATEGORIES,
    GRAPH_LAUNCH_CALLS,
    LAUNCH_FLOW_CATEGORIES,
    LINKED_CATEGORIES,
    SYNC_CATEGORY,
    correlation,
    pair_by_correlation,
    rename_categories,
)
from tokentrace.sources.proton import GPU_LANE_BASE, GRAPH_LANE_BASE, ProtonEvent, ProtonTrace, json_error
from tokentrace.sources.proton_pieces import NotPiecewise, StreamedDocument, stream_document
from tokentrace.units import us_list_to_ns

DIALECT = "kineto"
ANNOTATION_CATEGORY = "gpu_user_annotation"
PYTHON_CATEGORY = "python_function"
_PYTHON_LANE_BASE = 50000  # python_function lanes, after the runtime/op lanes
_DROPPED_KEYS = frozenset({"ts", "dur", "pid", "tid", "id"})  # read into columns (id: flows only)
_ABSENT = object()
_REST_KEYS = _DROPPED_KEYS | {"ph", "cat", "name", "bp"}  # the keys of a flow event
_SYNC_LANE_BASE = 150000  # cuda_sync lanes, between the annotation and the stream lanes
_HOST_CATEGORIES = ("cpu_op", "cuda_runtime", "cuda_driver")  # their pid is the profiled process's


@dataclasses.dataclass
class KinetoGpu(ProtonTrace):
    """The GPU side of a torch-profiler trace, laid out as Proton's.

    Attributes:
        replay_correlations: correlation ids of the graph launches (:data:`GRAPH_LAUNCH_CALLS`):
            their kernels are replayed from a graph, not launched one by one.
        launched: per kernel ``X`` event of :attr:`events`, in order, 1 when it was launched
            one by one (its correlation is no replay's); None: read from its ``args``.
    """

    replay_correlations: frozenset = frozenset()
    launched: bytes | None = None

    def kernels(self) -> list[tuple[str, int, int, int]]:
        """The kernels launched one by one (the estimator's evidence; a graph's replayed
        kernels have no launch call of their own), as :meth:`ProtonTrace.kernels`."""
        kernels = [e for e in self.events if e.ph == "X" and e.raw.get("cat") == "kernel"]
        launched = self.launched
        if launched is None or len(launched) != len(kernels):
            launched = [correlation(e.raw) not in self.replay_correlations for e in kernels]
        rows = [(e.raw.get("name", ""), e.ts_ns, e.ts_ns + e.dur_ns, e.lane)
                for e, one_by_one in zip(kernels, launched) if one_by_one]
        return sorted(rows, key=lambda row: (row[1], row[2]))


@dataclasses.dataclass
class KinetoTrace:
    """One torch-profiler trace, read.

    Attributes:
        gpu: everything but the ``python_function`` events kept apart, as the merge's GPU side.
        python: the ``python_function`` events when asked to keep them apart, else empty.
        host_pid: the OS pid of the profiled process (the pid of its host events).
        thread_names: host tid -> thread name (Kineto's ``thread <tid> (<process>)``).
        launch_tid: the host thread with the most runtime calls: the launching thread.
    """

    gpu: KinetoGpu
    python: PythonCalls
    host_pid: int | None
    thread_names: dict[int, str]
    launch_tid: int | None


def read_kineto(path: Path, python_apart: bool = False) -> KinetoTrace:
    """Reads a torch-profiler chrome trace (plain or gzip); a large one piece by piece (over
    ``piecewise_bytes`` of :func:`tokentrace.sources.backend.current`, in pieces of ``piece_bytes``).

    Args:
        path: the ``.trace.json[.gz]`` file.
        python_apart: keep the ``python_function`` events out of the GPU side (the caller
            makes them the host timeline).

    Raises:
        InputError: missing, not JSON, truncated, not a torch-profiler trace, or without GPU
            activity.
    """
    try:
        return _read(path, python_apart, pieces_allowed=True)
    except NotPiecewise:  # a large file whose cuts do not parse: read it whole, once what the
        pass  # pieces kept is freed (the exception's frames hold it until here)
    return _read(path, python_apart, pieces_allowed=False)


def _read(path: Path, python_apart: bool, pieces_allowed: bool) -> KinetoTrace:
    """Reads the file, a large one in pieces when ``pieces_allowed`` (else whole).

    Raises:
        NotPiecewise: the pieces do not parse alone.
    """
    if pieces_allowed:
        sizes = backend.current()
        found = stream_document(exact_chunks(iter_chunks(path, sizes.chunk_bytes)), sizes.piecewise_bytes,
                                sizes.piece_bytes)
    else:
        found = read_all(path)
        found = quote_long_times(found) if has_long_times(found[:1 << 20]) else found
    if isinstance(found, StreamedDocument):
        record = backend.start_pass(path, piecewise=True)
        columns = _Columns(path, python_apart, slim=True)
        for first, events in found.pieces():
            record.pieces += 1
            columns.add(first, events)
        doc = {**found.header, **(found.rest or {})}
        _check_document(path, doc)
    else:
        doc = _parse(path, found)
        del found
        columns = _Columns(path, python_apart, slim=False)
        backend.start_pass(path, piecewise=False).pieces = 1
        columns.add(0, doc.pop("traceEvents"))
    base = doc.get("baseTimeNanoseconds")
    return columns.finish(base if isinstance(base, int) and not isinstance(base, bool) else None)


def _parse(path: Path, raw: bytes) -> dict:
    if raw.lstrip().startswith(b"["):
        raise InputError(mismatch_message(path, TraceKind.KINETO, TraceKind.CHROME_ARRAY))
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise json_error(path, raw, exc) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError(f"{path}: no 'traceEvents' list; this is not a torch-profiler chrome trace")
    _check_document(path, doc)
    return doc


def _check_document(path: Path, doc: dict) -> None:
    if isinstance(doc.get("tokentrace"), dict):
        raise InputError(mismatch_message(path, TraceKind.KINETO, TraceKind.MERGED))
    if "viztracer_metadata" in doc:
        raise InputError(f"{path}: this is a VizTracer report, not a torch-profiler trace; "
                         "pass it as the rank's VizTracer report")


def _check_events(path: Path, events: list, first: int = 0) -> None:
    if set(map(type, events)) <= {dict} and all(map(dict.__contains__, events, repeat("ph"))):
        return
    for index, raw in enumerate(events):
        if type(raw) is not dict or "ph" not in raw:
            raise InputError(f"{path}: traceEvents[{first + index}] is not an event: {str(raw)[:80]}")


class _Columns:
    """What is kept of the events, piece by piece, column-wise; the trace once all are read.

    Attributes:
        failed: ``(rank of the check, its error)`` of the first bad event found: checks of
            later pieces run only where they rank before it (the whole-file read runs each
            check over every event before the next).
    """

    def __init__(self, path: Path, python_apart: bool, slim: bool) -> None:
        self.path, self.python_apart, self.slim = path, python_apart, slim
        self.failed: tuple[int, InputError] | None = None
        self.layout = _Lanes()
        self.python = PythonCalls()
        self.phs: list[str] = []
        self.keys: list[tuple] = []  # per event, what its lane depends on (shared tuples)
        self.starts: list[int] = []
        self.durations: list[int] = []
        self.payloads: list[dict] = []
        self.calls: dict = {}  # correlation id -> index of the first launch call with it
        self.activities: list[tuple[int, object]] = []  # (index, correlation) of linkable events
        self.kernel_correlations: list = []
        self.replays: set = set()
        self.runtime_calls: dict[tuple, int] = defaultdict(int)  # (pid, tid) -> cuda_runtime events
        self.categories: set = set()
        self._shared: dict = {}  # interned keys, names and argless payloads
        self._rests: dict[tuple, dict] = {}  # (ph, cat, name, bp) -> the payload of such flows

    def _passes(self, rank: int, check, *args) -> bool:
        if self.failed is not None and rank >= self.failed[0]:
            return False
        try:
            check(*args)
        except InputError as exc:
            self.failed = (rank, exc)
            return False
        return True

    def add(self, first: int, events: list) -> None:
        """Checks and keeps the events of one piece (``events[0]`` is ``traceEvents[first]``)."""
        path = self.path
        if not self._passes(0, _check_events, path, events, first):
            return
        rename_categories(events)
        apart = self.python_apart
        flows = LAUNCH_FLOW_CATEGORIES
        kept = [e for e in events if e["ph"] != "M" and not (apart and e.get("cat") == PYTHON_CATEGORY)
                and e.get("cat") not in flows]  # the arrows are drawn from correlation ids
        if not self._passes(1, check_phases, path, events, kept, first):
            return
        times = [e.get("ts") for e in kept]
        checked = checkable(times) if str in set(map(type, times)) else times  # exact_times quoted them
        if not self._passes(2, check_times, path, events, kept, "ts", checked, True, first):
            return
        durations = [e.get("dur", 0) if e["ph"] == "X" else 0 for e in kept]
        if not self._passes(3, check_times, path, events, kept, "dur", durations, True, first):
            return  # also once any piece failed: nothing more is kept
        self.layout.scan(events)
        if apart:
            self.python.add([e for e in events if e.get("cat") == PYTHON_CATEGORY], compact=self.slim)
        phs, cats = [e["ph"] for e in kept], [e.get("cat") for e in kept]
        self._links(kept, cats, phs)
        self.categories.update(cats)
        shared = self._shared
        self.phs += phs
        self.starts += us_list_to_ns(times)
        self.durations += us_list_to_ns(durations)
        self.keys += [shared.setdefault(key, key) for key in
                      zip(cats, phs, [e.get("pid") for e in kept], [e.get("tid") for e in kept])]
        self.kernel_correlations += [correlation(e) for e, cat, ph in zip(kept, cats, phs)
                                     if cat == "kernel" and ph == "X"]
        for e in [e for e, cat in zip(kept, cats) if cat == "cuda_runtime"]:
            self.runtime_calls[(e.get("pid"), e.get("tid"))] += 1
        self.payloads += self._slim(kept) if self.slim else kept

    def _links(self, kept: list[dict], cats: list, phs: list) -> None:
        """Notes the launch calls and the GPU activities of a piece by correlation id (the
        piece's events get the indices after those already kept)."""
        base, calls, activities = len(self.phs), self.calls, self.activities
        for index in [i for i, cat in enumerate(cats) if cat in LINKED_CATEGORIES or cat in CALL_CATEGORIES]:
            if phs[index] != "X":
                continue
            event = kept[index]
            found = correlation(event)
            if found is None:
                continue
            if cats[index] in CALL_CATEGORIES:
                calls.setdefault(found, base + index)
                if event.get("name") in GRAPH_LAUNCH_CALLS:
                    self.replays.add(found)
            else:
                activities.append((base + index, found))

    def _slim(self, kept: list[dict]) -> list[dict]:
        """What the merge needs of each event: no times, ids or lanes; ``args`` as the JSON the
        merge writes (sorted keys, an ``orjson.Fragment``: a third of the dict's memory, copied to
        its exact size: ``orjson.dumps`` leaves KBs of spare capacity on what it returns); events
        without args share one dict per distinct rest. One loop: faster than a pass per key."""
        shared, rests, dropped, out = self._shared, self._rests, _DROPPED_KEYS, []
        dumps, fragment, view, sort = orjson.dumps, orjson.Fragment, memoryview, orjson.OPT_SORT_KEYS
        for raw in kept:
            key = None
            if "args" not in raw and raw.keys() <= _REST_KEYS and type(raw.get("cat")) is str \
                    and type(raw.get("name")) is str and type(raw.get("bp", "")) is str:
                # a flow end or start: its rest told by its texts
                key = (raw["ph"], raw["cat"], raw["name"], raw.get("bp"))
                slim = rests.get(key)
                if slim is not None:
                    out.append(slim)
                    continue
            slim = raw.copy()  # (a copy less the dropped keys: half a dict comprehension's cost)
            for dropped_key in dropped:
                slim.pop(dropped_key, None)
            name = slim.get("name")
            if type(name) is str:
                slim["name"] = shared.setdefault(name, name)
            args = slim.get("args", _ABSENT)
            if args is _ABSENT:
                slim = shared.setdefault(dumps(slim), slim)
                if key is not None:
                    rests[key] = slim
            elif type(args) is dict and "scope_id" not in args:  # the writer reads scope ids back
                slim["args"] = fragment(view(dumps(args, option=sort)).tobytes())
            out.append(slim)
        return out

    def finish(self, base_ns: int | None) -> KinetoTrace:
        """The trace, once every piece is added.

        Raises:
            InputError: the first bad event, or no GPU activity.
        """
        if self.failed is not None:
            raise self.failed[1]
        layout = self.layout
        lane_of = {key: layout.lane(*key) for key in dict.fromkeys(self.keys)}  # first appearance
        lanes = [lane_of[key] for key in self.keys]
        replays = frozenset(self.replays)
        launched = bytes(c not in replays for c in self.kernel_correlations)
        trace = KinetoGpu([self.path], DIALECT, base_ns, [], layout.names, replay_correlations=replays,
                          launched=launched)
        parsed = list(map(ProtonEvent, self.phs, lanes, self.starts, self.durations, self.payloads))
        del lanes, self.phs, self.starts, self.durations, self.payloads, self.keys
        trace.events = parsed
        trace.launch_pairs = pair_by_correlation(trace, self.calls, self.activities)
        del self.calls, self.activities
        if not any(e.ph == "X" and e.raw.get("cat") in GPU_CATEGORIES for e in trace.events):
            if any(type(cat) is str and cat.lower().startswith("mtia") for cat in self.categories):
                raise InputError(f"{self.path}: an MTIA trace (Meta's accelerator: no GPU kernels); "
                                 "tokentrace reads GPU traces (NVIDIA CUDA, AMD ROCm)")
            raise InputError(
                f"{self.path}: the torch-profiler trace has no GPU kernels; record with "
                "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] and run GPU work inside it"
            )
        counts: dict = defaultdict(int)
        for (pid, tid), n in self.runtime_calls.items():
            if pid == layout.host_pid:
                counts[tid] += n
        launch_tid = max(counts, key=lambda tid: (counts[tid], -tid)) if counts else None
        return KinetoTrace(trace, self.python, layout.host_pid, layout.thread_names, launch_tid)


class _Lanes:
    """Input ``(pid, tid)`` -> lane, with the lane names; host lanes first, then annotation
    lanes, then GPU stream lanes, each in order of first appearance."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self._lanes: dict[tuple, int] = {}
        self._counts: dict[int, int] = defaultdict(int)
        self.thread_names: dict[int, str] = {}
        self.host_pid: int | None = None

    def scan(self, events: list[dict]) -> None:
        """Reads the thread names and the host pid (every event, in file order)."""
        for raw in events if self.host_pid is None else ():
            if raw.get("cat") in _HOST_CATEGORIES and isinstance(raw.get("pid"), int) and not _names_thread(raw):
                self.host_pid = raw["pid"]
                break
        for raw in [e for e in events if e["ph"] == "M"]:
            if _names_thread(raw):
                self.thread_names.setdefault(raw["tid"], str(raw.get("args", {}).get("name", "")).strip())

    def lane(self, cat, ph, pid, tid) -> int:
        """The lane of an event (known once :meth:`scan` has seen every event)."""
        if cat in GPU_CATEGORIES:
            key, base = ("gpu", pid, tid), GPU_LANE_BASE
        elif cat == SYNC_CATEGORY:  # a wait on a stream or an event: it may overlap the kernels
            key, base = ("sync", pid, tid), _SYNC_LANE_BASE
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
        if role == "sync":
            return f"{device or 'GPU '}Stream {tid} syncs" if isinstance(tid, int) and tid >= 0 else f"{device}GPU syncs"
        if role == "python":
            return f"Python thread {tid} (torch profiler)"
        if role == "cpu":
            return f"CPU Thread {tid} (torch profiler)"
        return "torch profiler"


def _names_thread(raw: dict) -> bool:
    return raw.get("ph") == "M" and raw.get("name") == "thread_name" and isinstance(raw.get("tid"), int)
