"""Reader of Proton chrome traces, both dialects.

* triton <= 3.8: ``X`` kernels only, no ``pid``, ``tid`` = stream, no anchor.
* triton >= 3.9 (and tokenspeed's fork): one ``pid 0`` process with CPU lanes (scopes, metric
  scopes), GPU lanes (kernels), ``s``/``f`` launch->kernel flows and ``baseTimeNanoseconds``.

Proton files are small (MBs), so they are parsed whole with orjson. Times become integer
nanoseconds from the Proton zero (the earliest part's ``baseTimeNanoseconds`` when parts exist).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict, deque
from collections.abc import Iterator, Sequence
from pathlib import Path

import orjson

from tokentrace.errors import InputError
from tokentrace.sources import backend
from tokentrace.sources.detect import TraceKind, mismatch_message, require_kind
from tokentrace.sources.event_fields import check_lanes, check_phases, check_times
from tokentrace.sources.fileio import read_all, truncated_error
from tokentrace.sources.proton_pieces import (
    Interner,
    NotPiecewise,
    document_ends,
    pieces,
    split_document,
)
from tokentrace.units import us_list_to_ns

GPU_LANE_BASE = 200000  # Proton 3.9: GPU lanes are 200000 + stream
GRAPH_LANE_BASE = 100000  # Proton 3.9: CUDA-graph lanes are 100000 + stream


@dataclasses.dataclass(slots=True)
class ProtonEvent:
    """One Proton event with integer times (ns from the Proton zero).

    Attributes:
        ph: ``X``, ``s``, ``f`` or ``i``.
        lane: the input ``tid`` (lane) it sits on.
        ts_ns: start time.
        dur_ns: duration (``X`` only, else 0).
        raw: the input event (name, cat, args, id, bp ... are copied from it).
        flow_pair: for ``s``/``f``: index of the launch->kernel pair, unique in the rank.
    """

    ph: str
    lane: int
    ts_ns: int
    dur_ns: int
    raw: dict
    flow_pair: int | None = None

    @property
    def end_ns(self) -> int:
        """End time of an ``X`` event."""
        return self.ts_ns + self.dur_ns


@dataclasses.dataclass
class ProtonTrace:
    """The Proton side of one rank (all its parts).

    Attributes:
        paths: the input files, part order.
        dialect: ``"3.9"`` (pid lanes, flows, anchor) or ``"3.8"`` (kernels only).
        base_ns: Unix-epoch ns of the Proton zero, ``None`` without anchor.
        events: ``X``/``s``/``f`` events, file order (parts concatenated).
        lane_names: input tid -> thread name (``GPU Stream 7``, ``CPU Thread 0`` ...).
        n_flows: number of launch->kernel pairs (``f`` events matched to an ``s``, or
            :attr:`launch_pairs`).
        unpaired_flows: ``f`` events without an ``s`` (and ``s`` without ``f``).
        launch_pairs: a torch-profiler trace's launch arrows, ``(call, activity)`` indices in
            :attr:`events`, which hold no flow events for them
            (:func:`~tokentrace.sources.kineto_links.pair_by_correlation`); ``()`` otherwise.
    """

    paths: list[Path]
    dialect: str
    base_ns: int | None
    events: list[ProtonEvent]
    lane_names: dict[int, str]
    n_flows: int = 0
    unpaired_flows: int = 0
    launch_pairs: list[tuple[int, int]] | tuple = ()

    def kernels(self, graph: bool = False) -> list[tuple]:
        """``(name, start_ns, end_ns, stream)`` of every kernel, in Proton time, sorted by start.

        ``stream`` is the input lane (one per CUDA stream in both dialects). With ``graph``,
        each row ends with whether the kernel ran in a CUDA-graph replay (:func:`in_graph`).
        """
        if graph:
            rows = [(e.raw.get("name", ""), e.ts_ns, e.ts_ns + e.dur_ns, e.lane, in_graph(e.raw))
                    for e in self.events if e.ph == "X" and e.raw.get("cat") == "kernel"]
        else:
            rows = [(e.raw.get("name", ""), e.ts_ns, e.ts_ns + e.dur_ns, e.lane) for e in self.events
                    if e.ph == "X" and e.raw.get("cat") == "kernel"]
        return sorted(rows, key=lambda row: (row[1], row[2]))

    @property
    def n_kernels(self) -> int:
        """Number of kernel ``X`` events."""
        return sum(1 for e in self.events if e.ph == "X" and e.raw.get("cat") == "kernel")


# Proton (triton 3.6 and 3.9 alike) roots the call stack of a kernel that ran in a CUDA-graph
# replay at this context: the kernel's own context was captured, not live at launch.
GRAPH_CONTEXT = "<captured_at>"


def in_graph(raw: dict) -> bool:
    """True for a kernel that Proton recorded as part of a CUDA-graph replay."""
    args = raw.get("args")
    stack = args.get("call_stack") if type(args) is dict else None
    return type(stack) is list and GRAPH_CONTEXT in stack


def estimator_kernels(trace: ProtonTrace) -> list[tuple]:
    """The kernel rows the offset estimator takes: with the graph flag where the trace tells it
    (:meth:`ProtonTrace.kernels`); a subclass that lays its kernels out itself (the
    torch-profiler trace drops replayed kernels) gives its own rows."""
    if type(trace).kernels is ProtonTrace.kernels:
        return trace.kernels(graph=True)
    return trace.kernels()


def is_kernel(event: ProtonEvent) -> bool:
    """True for a GPU kernel ``X`` event."""
    return event.ph == "X" and event.raw.get("cat") == "kernel"


def read_proton(paths: Sequence[Path]) -> ProtonTrace:
    """Reads the Proton file(s) of one rank (several for ``.proton.part_<N>`` files); a large
    document a piece at a time (over ``piecewise_bytes``, in pieces of ``piece_bytes``, of
    :func:`tokentrace.sources.backend.current`).

    Args:
        paths: the rank's Proton file or parts.

    Raises:
        InputError: missing, not JSON, truncated, a hatchet file, a VizTracer report, or empty.
    """
    paths = [Path(p) for p in paths]
    sizes = backend.current()
    try:
        trace = _read_parts(paths, (sizes.piecewise_bytes, sizes.piece_bytes))
    except NotPiecewise:  # a large part whose cuts do not parse: read it whole
        trace = _read_parts(paths, None)
    if not any(e.ph == "X" for e in trace.events):
        raise InputError(
            f"{trace.paths[0]}: the Proton trace has no kernel or scope events; check that "
            "kernels ran between proton.start() and proton.finalize(), then re-record"
        )
    return trace


def _read_parts(paths: list[Path], pieces: tuple[int, int] | None) -> ProtonTrace:
    """Reads every part; those over ``pieces`` = ``(piecewise_bytes, piece_bytes)`` piece by
    piece (None: every one whole; see :mod:`.proton_pieces`).

    Each document of a part (triton 3.6 writes one per CUDA stream, all on one time zero) is
    shifted by its own anchor, as a part is; flows pair within a part, across its documents.

    Raises:
        NotPiecewise: a large part's pieces do not parse alone.
    """
    parts = [_load(path, pieces) for path in paths]
    bases = [header.get("baseTimeNanoseconds") for docs in parts for header, _ in docs]
    anchored = all(isinstance(b, int) for b in bases)
    base_ns = min(bases) if anchored else None
    trace = ProtonTrace(list(paths), "3.8", base_ns, [], {})
    for path, docs in zip(paths, parts):
        shifted = [(pieces, header["baseTimeNanoseconds"] - base_ns if anchored else 0)
                   for header, pieces in docs]
        _add_part(trace, path, shifted, len(docs))
    return trace


def _load(path: Path, sizes: tuple[int, int] | None = None) -> list[tuple[dict, Iterator[tuple]]]:
    """The part's documents, each as its top-level members and its events as ``(index of the
    first, events)`` pieces (one piece unless ``sizes`` is ``(piecewise_bytes, piece_bytes)``
    and the document is over its first).

    Proton of triton 3.6 writes one document per CUDA stream, concatenated with a newline;
    the text is cut at the joints found in one pass (:func:`document_ends`) and each document
    parsed once. A candidate that does not parse while more follow was a joint inside a string:
    it is joined to the next.

    Raises:
        InputError: a document is not JSON, cut short (naming it when there are several), or
            of another kind.
    """
    require_kind(path, TraceKind.PROTON)
    text = read_all(path)
    ends = document_ends(text)
    if len(ends) == 1:
        return [_load_document(path, text, sizes, None)]
    docs: list[tuple[dict, Iterator[tuple]]] = []
    start = 0
    for position, end in enumerate(ends):
        last = position == len(ends) - 1
        try:
            docs.append(_load_document(path, text[start:end], sizes, (len(docs) + 1, last)))
        except InputError:
            if last:
                raise
            continue  # the joint lay inside a value: parse it with the next candidate
        start = end
    return docs


def _load_document(path: Path, text: bytes, sizes: tuple[int, int] | None,
                   place: tuple[int, bool] | None) -> tuple[dict, Iterator[tuple]]:
    """One document: ``place`` is ``(its number, whether it is the last)`` when the file holds
    several, named in errors."""
    if sizes is not None and len(text) > sizes[0]:
        found = split_document(text)
        if found is not None:
            header, start, end = found
            _check_header(path, header)
            return header, _interned(pieces(text, start, end, sizes[1]), backend.start_pass(path, piecewise=True))
    doc = _parse(path, text, place)
    backend.start_pass(path, piecewise=False).pieces = 1
    return doc, iter([(0, doc["traceEvents"])])


def _interned(parts: Iterator[tuple[int, list]], record: backend.ReadPass) -> Iterator[tuple[int, list, list]]:
    intern = Interner()
    for first, events in parts:
        record.pieces += 1
        yield first, events, intern


def _parse(path: Path, raw: bytes, place: tuple[int, bool] | None = None) -> dict:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise json_error(path, raw, exc, place) from None
    if isinstance(doc, list):
        array_trace = bool(doc) and isinstance(doc[0], dict) and "ph" in doc[0]
        found = TraceKind.CHROME_ARRAY if array_trace else TraceKind.PROTON_HATCHET
        raise InputError(mismatch_message(path, TraceKind.PROTON, found))
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError(f"{path}: no 'traceEvents' list; this is not a Proton chrome trace")
    _check_header(path, doc)
    return doc


def _check_header(path: Path, doc: dict) -> None:
    if isinstance(doc.get("tokentrace"), dict):
        raise InputError(mismatch_message(path, TraceKind.PROTON, TraceKind.MERGED))
    if "viztracer_metadata" in doc:
        raise InputError(mismatch_message(path, TraceKind.PROTON, TraceKind.VIZTRACER))


def json_error(path: Path, raw: bytes, exc: Exception, place: tuple[int, bool] | None = None) -> InputError:
    """Maps a JSON parse failure to 'truncated' (cut at the end) or 'not JSON'.

    ``place``: ``(number, is the last)`` of the document that failed when the file holds several
    concatenated documents; only the last one can be cut short.
    """
    position = getattr(exc, "pos", 0) or 0
    document = "the JSON" if place is None else f"JSON document {place[0]}"
    if raw.strip() and position >= len(raw.rstrip()) - 1 and (place is None or place[1]):
        return truncated_error(path, f"{document} ends early")
    where = "" if place is None else f"{document}: "
    return InputError(f"{path}: {where}not valid JSON ({exc}); expected a chrome-trace JSON file")


def _add_part(trace: ProtonTrace, path: Path, docs: list[tuple[Iterator[tuple], int]], n_docs: int) -> None:
    """Appends one part's events and pairs its flows.

    ``docs`` holds per document its pieces and the shift of its times: the pieces yield
    ``(index of the first event, events[, interner])``: one piece, or the pieces of a large
    file (their events then keep only an interned rest of their keys).
    Column-wise (list comprehensions, one batch time conversion) rather than one Python call
    per event: a call costs more than the work it would do on one event (~10^4 per rank).
    """
    new: list[ProtonEvent] = []
    for number, (parts, shift_ns) in enumerate(docs, 1):
        where = path if n_docs == 1 else Path(f"{path} (JSON document {number})")
        for first, events, *intern in parts:
            new.extend(_piece_events(trace, where, events, shift_ns, first, intern[0] if intern else None))
    trace.events.extend(_pair_flows(trace, new))


def _piece_events(trace: ProtonTrace, path: Path, events: list, shift_ns: int, first: int,
                  intern: Interner | None) -> list[ProtonEvent]:
    if not all(type(raw) is dict and "ph" in raw for raw in events):
        bad = next(raw for raw in events if not isinstance(raw, dict) or "ph" not in raw)
        raise InputError(f"{path}: an entry of traceEvents is not an event: {str(bad)[:80]}")
    kept = [raw for raw in events if raw["ph"] != "M"]
    if len(kept) < len(events):
        meta = [raw for raw in events if raw["ph"] == "M"]
        for raw, lane in zip(meta, check_lanes(path, events, meta, [raw.get("tid", 0) for raw in meta], first)):
            _add_metadata(trace, raw, lane)
    check_phases(path, events, kept, first)
    lanes = check_lanes(path, events, kept, [raw.get("tid", 0) for raw in kept], first)
    times = [raw.get("ts") for raw in kept]
    check_times(path, events, kept, "ts", times, True, first)
    starts = us_list_to_ns(times)
    if shift_ns:
        starts = [start + shift_ns for start in starts]
    times = [raw.get("dur", 0) for raw in kept]
    check_times(path, events, kept, "dur", times, True, first)
    durations = us_list_to_ns(times)
    if any("pid" in raw for raw in kept):
        trace.dialect = "3.9"
    payloads = kept if intern is None else intern(kept)
    return list(map(ProtonEvent, [raw["ph"] for raw in kept], lanes, starts, durations, payloads))


def _pair_flows(trace: ProtonTrace, events: list[ProtonEvent]) -> list[ProtonEvent]:
    """Pairs each ``f`` with the earliest unmatched ``s`` of its id; drops unpaired ends.

    An ``f`` without ``s``, or an ``s`` without ``f``, draws no arrow (counted as unpaired).
    """
    pending: dict[object, deque[ProtonEvent]] = defaultdict(deque)  # id -> unmatched s, file order
    dropped: set[int] = set()
    for event in events:
        if event.ph == "s":
            pending[event.raw.get("id")].append(event)
        elif event.ph == "f":
            queue = pending.get(event.raw.get("id"))
            if queue:
                queue.popleft().flow_pair = event.flow_pair = trace.n_flows
                trace.n_flows += 1
            else:
                dropped.add(id(event))
    dropped.update(id(event) for queue in pending.values() for event in queue)
    if not dropped:
        return events
    trace.unpaired_flows += len(dropped)
    return [event for event in events if id(event) not in dropped]


def _add_metadata(trace: ProtonTrace, raw: dict, lane: int) -> None:
    if raw.get("name") == "thread_name":
        trace.lane_names[lane] = str(raw.get("args", {}).get("name", f"Lane {lane}"))
