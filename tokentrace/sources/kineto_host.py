"""A torch-profiler trace's ``python_function`` events as the rank's host timeline.

Without a VizTracer report, ``with_stack=True`` traces still say what Python ran: one
``python_function`` event per call. Two things keep them from serving as VizTracer frames:

* **Names.** Kineto writes ``serve_engine.py(208): flush_request_log`` and
  ``<built-in method item of Tensor object at 0x...>``; the queries read VizTracer's
  ``flush_request_log (serve_engine.py:208)`` (a Python frame) and ``Tensor.item`` (a C call).
  :func:`frame_name` rewrites them.
* **Nesting.** Kineto's times are rounded separately, so a call may end a few ns after its
  caller, or start before its previous sibling ended: Perfetto drops such partial overlaps
  (1,680 on ``engine_kineto_stack``). :func:`nest` clips each call to the call open around it;
  nothing is dropped and no call moves.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections import defaultdict

import orjson

from tokentrace.units import ns_list_to_us_text, us_list_to_ns

_FRAME_RE = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.+)$")
_METHOD_RE = re.compile(r"^<built-in method (?P<func>\S*) of (?P<owner>.+?) object at 0x[0-9a-f]+>$")
_FUNCTION_RE = re.compile(r"^<built-in function (?P<func>\S+)>$")
_MODULE_SCOPE = "nn.Module: "
#: Put before the path of a standard-library frame (see :func:`_file_name`).
STDLIB_PREFIX = "<stdlib>/"
# Builtins whose module the rules need: the standard library's only builtin of that name.
_BUILTIN_NAMES = {"collect": "gc.collect"}


def frame_name(name: str) -> str:
    """VizTracer's name for a Kineto ``python_function`` name.

    ``file.py(12): func`` -> ``func (file.py:12)`` (``func (<stdlib>/threading.py:12)`` for the
    standard library's); ``<built-in method m of T object at 0x..>``
    -> ``T.m`` (``m`` for pybind11's function records); ``<built-in function f>`` -> ``f`` (Kineto
    does not name its module), but ``gc.collect`` for ``collect`` (the collector's entry point,
    which the gc rule reads); ``nn.Module: Name_0`` (torch's module annotation, a scope around
    the module's Python frames) -> a frame ``nn.Module: Name_0 (<nn.Module>:0)``, so that it is
    never taken for the C call that held the thread; any other name is kept.
    """
    if match := _FRAME_RE.match(name):
        return f"{match['func']} ({_file_name(match['file'])}:{match['line']})"
    if name.startswith(_MODULE_SCOPE):
        return f"{name} (<nn.Module>:0)"
    if match := _METHOD_RE.match(name):
        owner, func = match["owner"], match["func"]
        if owner.startswith("pybind11_builtins."):  # a bound C++ function: its record, no module
            return func or "pybind11 function"
        return f"{owner}.{func}" if func else owner
    if match := _FUNCTION_RE.match(name):
        return _BUILTIN_NAMES.get(match["func"], match["func"])
    return name


def _file_name(path: str) -> str:
    """Kineto writes a module's path relative to its ``sys.path`` entry, so the standard
    library's (``threading.py``, ``json/encoder.py``) cannot be told by a ``/lib/python3.x/``
    part as VizTracer's can: they are written ``<stdlib>/threading.py``, which the queries'
    standard-library test reads (their frames count for their callers)."""
    top = path.split("/", 1)[0].removesuffix(".py")
    return f"{STDLIB_PREFIX}{path}" if top in sys.stdlib_module_names else path


def nest(starts_ns: list[int], ends_ns: list[int]) -> tuple[list[int], int]:
    """Clips each interval of one thread to the interval open around it, in place.

    Returns the new ends and the number of intervals clipped. An interval that starts inside an
    open one but ends after it ends where that one ends.
    """
    order = sorted(range(len(starts_ns)), key=lambda i: (starts_ns[i], -ends_ns[i]))
    stack: list[int] = []  # ends of the open intervals
    clipped = 0
    for index in order:
        start = starts_ns[index]
        while stack and stack[-1] <= start:
            stack.pop()
        if stack and ends_ns[index] > stack[-1]:
            ends_ns[index] = stack[-1]
            clipped += 1
        stack.append(ends_ns[index])
    return ends_ns, clipped


@dataclasses.dataclass
class KinetoHost:
    """The host timeline of one rank read from its ``python_function`` events.

    Attributes:
        pid: the profiled process's OS pid.
        tids: per event, its thread.
        names: per event, its VizTracer-style name.
        starts_ns: per event, its start (ns from the trace's zero).
        ends_ns: per event, its end, nested (see :func:`nest`).
        args: per event, its Kineto args (Python id and parent id).
        thread_names: tid -> name.
        n_clipped: events whose end was moved to nest them.
    """

    pid: int
    tids: list[int]
    names: list[str]
    starts_ns: list[int]
    ends_ns: list[int]
    args: list[dict]
    thread_names: dict[int, str]
    n_clipped: int = 0

    @property
    def first_ts_ns(self) -> int | None:
        """The earliest start, ``None`` without events."""
        return min(self.starts_ns, default=None)

    def serialise(self, shift_ns: int, pid: int, tid_of: dict[int, int]) -> list[bytes]:
        """The events and their thread names as merged-file JSON, times shifted by ``shift_ns``.

        Args:
            shift_ns: added to every time.
            pid: the process's pid in the output.
            tid_of: input tid -> output tid (every tid of :attr:`tids`).
        """
        starts = ns_list_to_us_text([s + shift_ns for s in self.starts_ns])
        durations = ns_list_to_us_text([e - s for s, e in zip(self.starts_ns, self.ends_ns)])
        fragment = orjson.Fragment
        rows = [
            {"ph": "X", "cat": "python_function", "name": name, "pid": pid, "tid": tid_of[tid],
             "ts": fragment(start), "dur": fragment(dur), "args": args}
            for name, tid, start, dur, args in zip(self.names, self.tids, starts, durations, self.args)
        ]
        rows += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid_of[tid], "args": {"name": name}}
                 for tid, name in sorted(self.thread_names.items()) if tid in tid_of]
        return [memoryview(orjson.dumps(rows, option=orjson.OPT_SORT_KEYS))[1:-1]] if rows else []


class PythonCalls:
    """The ``python_function`` events of a trace, column-wise (what :func:`host_from_python`
    reads of each: pid, ph, tid, ts, dur, name, args), appended a piece of the file at a time."""

    def __init__(self) -> None:
        self.pids: list = []
        self.phs: list = []
        self.tids: list = []
        self.starts_us: list = []
        self.durations_us: list = []
        self.names: list = []
        self.args: list = []
        self._shared: dict = {}

    def __len__(self) -> int:
        return len(self.phs)

    def add(self, events: list[dict], compact: bool = False) -> None:
        """Appends ``events``; when ``compact``, repeated ids and names are shared and every
        ``args`` object is kept as the JSON the merge writes (see ``kineto._Columns._slim``)."""
        self.phs += [e.get("ph") for e in events]
        self.starts_us += [e.get("ts", 0) for e in events]
        self.durations_us += [e.get("dur", 0) for e in events]
        if not compact:
            self.pids += [e.get("pid") for e in events]
            self.tids += [e.get("tid") for e in events]
            self.names += [e.get("name", "") for e in events]
            self.args += [e.get("args", {}) for e in events]
            return
        shared = self._shared.setdefault  # ints and names (exact types: equal values, same object)
        self.pids += [shared(v, v) if type(v := e.get("pid")) is int else v for e in events]
        self.tids += [shared(v, v) if type(v := e.get("tid")) is int else v for e in events]
        self.names += [shared(v, v) if type(v := e.get("name", "")) is str else v for e in events]
        dumps, fragment, view, sort = orjson.dumps, orjson.Fragment, memoryview, orjson.OPT_SORT_KEYS
        self.args += [fragment(view(dumps(v, option=sort)).tobytes()) if type(v := e.get("args", {})) is dict
                      else v for e in events]


@dataclasses.dataclass(frozen=True)
class HostOutline:
    """What the merge needs to know of a host timeline before it is built (:func:`outline`).

    Attributes:
        tids: the threads of its events.
        first_ts_ns: the earliest start, ``None`` without events.
    """

    tids: frozenset[int]
    first_ts_ns: int | None


def outline(events: PythonCalls, pid: int) -> HostOutline:
    """The threads and the earliest start of the timeline :func:`host_from_python` builds from
    ``events`` and ``pid``, without building it (a few % of its cost)."""
    mine = _own_calls(events, pid)
    return HostOutline(frozenset(_picked(events.tids, mine)),
                       min(us_list_to_ns(_picked(events.starts_us, mine)), default=None))


def _own_calls(events: PythonCalls, pid: int) -> list[int]:
    """The indices of the calls of ``pid`` that the timeline holds (complete, on a thread)."""
    return [i for i, (p, ph, tid) in enumerate(zip(events.pids, events.phs, events.tids))
            if p == pid and ph == "X" and isinstance(tid, int)]


def _picked(column: list, mine: list[int]) -> list:
    return column if len(mine) == len(column) else [column[i] for i in mine]  # mostly all


def host_from_python(events: list[dict] | PythonCalls, pid: int, thread_names: dict[int, str]) -> KinetoHost:
    """The host timeline of the ``python_function`` events of ``pid`` (other pids are left out:
    a torch-profiler trace profiles one process)."""
    if not isinstance(events, PythonCalls):
        calls, events = PythonCalls(), list(events)
        calls.add(events)
        events = calls
    mine = _own_calls(events, pid)
    starts = us_list_to_ns(_picked(events.starts_us, mine))
    ends = [s + d for s, d in zip(starts, us_list_to_ns(_picked(events.durations_us, mine)))]
    tids = list(_picked(events.tids, mine))
    by_thread: dict[int, list[int]] = defaultdict(list)
    for index, tid in enumerate(tids):
        by_thread[tid].append(index)
    clipped = 0
    for indices in by_thread.values():
        new_ends, n = nest([starts[i] for i in indices], [ends[i] for i in indices])
        for i, end in zip(indices, new_ends):
            ends[i] = end
        clipped += n
    renamed: dict[str, str] = {}  # a name is rewritten once, its frames share the result
    names = [renamed.get(name) or renamed.setdefault(name, frame_name(name))
             for name in map(str, _picked(events.names, mine))]
    args = list(_picked(events.args, mine))
    used = {tid: thread_names.get(tid, f"thread {tid}") for tid in by_thread}
    return KinetoHost(pid, tids, names, starts, ends, args, used, clipped)
