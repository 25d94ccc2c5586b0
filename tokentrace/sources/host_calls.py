"""The host calls the offset estimator needs, picked out of a VizTracer report by streaming.

A VizTracer report is tens of MB (55 MB per rank for a 120-step run) while the estimator needs
only two kinds of host calls: the Triton launches (``cuda_utils.launch`` under triton >= 3.9,
``__triton_launcher.launch`` before) and the calls that wait for the GPU (``Tensor.cpu``,
``Tensor.item``, ``Tensor.tolist``, ``torch._C._cuda_synchronize``). The file is read in chunks
(gzip transparently); each chunk is searched with ``bytes.find`` for the quoted call names, and
only those events are decoded. Memory stays at about two chunks, whatever the file size.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tokentrace.sources._raw.scan import positions
from tokentrace.sources.fileio import CHUNK_BYTES, open_bytes
from tokentrace.units import us_to_ns

# The C call that enqueues a Triton kernel, as VizTracer names it (verified on the real traces:
# triton 3.9 -> cuda_utils.launch, triton 3.6 -> __triton_launcher.launch; one per kernel).
LAUNCH_NAMES = ("cuda_utils.launch", "__triton_launcher.launch")
# Calls that return only after the current CUDA stream has drained (a device-to-host copy
# followed by a stream synchronisation).
STREAM_WAIT_NAMES = ("Tensor.cpu", "Tensor.item", "Tensor.tolist")
# Calls that return only after every stream of the device has drained.
DEVICE_WAIT_NAMES = ("torch._C._cuda_synchronize",)

_NAME_KEY = re.compile(rb'"name"\s*:\s*$')
_TS = re.compile(rb'"ts"\s*:\s*(-?[0-9][0-9.eE+-]*)')
_DUR = re.compile(rb'"dur"\s*:\s*(-?[0-9][0-9.eE+-]*)')
_PH = re.compile(rb'"ph"\s*:\s*"([A-Za-z])"')
_OVERFLOW = re.compile(rb'"overflow"\s*:\s*(true|false)')
# One search per needle, then the names it starts (4 passes over the bytes instead of 6); with
# the index of a letter rare in VizTracer reports (:func:`~tokentrace.sources._raw.scan.positions`:
# memchr on it skips whole stretches between its hits, where the common letters of ``"Tensor.``
# keep ``bytes.find``'s skips short: ``T`` and ``z`` are 0.01-0.03 % of a report's bytes, the
# letters of the launch names 0.5 % and more), else -1 (``bytes.find`` of the needle).
_SEARCHES = (
    (b'"cuda_utils.launch"', -1, ("cuda_utils.launch",)),
    (b'"__triton_launcher.launch"', -1, ("__triton_launcher.launch",)),
    (b'"Tensor.', b'"Tensor.'.index(b"T"), STREAM_WAIT_NAMES),
    (b'"torch._C._cuda_synchronize"', b'"torch._C._cuda_synchronize"'.index(b"z"), DEVICE_WAIT_NAMES),
)
# How far before a call name its "name": key may start (covers any whitespace style).
_KEY_LOOKBEHIND = 16


@dataclass(frozen=True)
class HostCall:
    """One traced host call, in VizTracer time.

    Attributes:
        name: the VizTracer event name (``cuda_utils.launch``, ``Tensor.cpu`` ...).
        begin_ns: when the call began (CLOCK_MONOTONIC ns).
        end_ns: when it returned.
    """

    name: str
    begin_ns: int
    end_ns: int

    @property
    def waits_for_device(self) -> bool:
        """True for a device-wide synchronisation (every stream), False for a stream wait."""
        return self.name in DEVICE_WAIT_NAMES


@dataclass(frozen=True)
class HostEvents:
    """What the estimator reads from one VizTracer report.

    Attributes:
        launches: Triton launch calls, sorted by begin.
        waits: calls that wait for the GPU, sorted by begin.
        overflow: ``viztracer_metadata.overflow`` (None when the file does not say): True means
            the earliest host events are gone.
        unparsed: named events whose ``ts``/``dur`` could not be read (skipped).
    """

    launches: tuple[HostCall, ...]
    waits: tuple[HostCall, ...]
    overflow: bool | None = None
    unparsed: int = 0


def read_host_events(viz_path: Path, chunk_bytes: int = CHUNK_BYTES) -> HostEvents:
    """Streams a VizTracer report and returns its Triton launches and GPU waits.

    Args:
        viz_path: the ``.viztracer.json`` file, plain or gzip.
        chunk_bytes: bytes decompressed per step (memory is about twice this).

    Returns:
        The launches and waits, each sorted by begin time.
    """
    collector = HostEventsCollector()
    for region in _event_regions(viz_path, chunk_bytes):
        collector.feed(region, 0, len(region))
        collector.feed_overflow(region)
    return collector.result()


class HostEventsCollector:
    """Picks launch and wait calls out of ranges of VizTracer bytes, fed in file order.

    Every range must end just after a ``}`` (or at the end of the file), so no event is cut;
    the merge feeds it the ranges its copy of the events already reads (one read of the file).
    """

    def __init__(self) -> None:
        self.calls: list[HostCall] = []
        self.unparsed = 0
        self.overflow: bool | None = None

    def feed(self, region: bytes, start: int, end: int) -> None:
        """Collects the wanted calls of ``region[start:end]``."""
        for needle, rare, names in _SEARCHES:
            found, bad = _calls_named(region, start, end, needle, rare, names)
            self.calls.extend(found)
            self.unparsed += bad

    def feed_overflow(self, region: bytes) -> None:
        """Reads ``viztracer_metadata.overflow`` if ``region`` holds it."""
        flag = _OVERFLOW.search(region)
        if flag:
            self.overflow = flag.group(1) == b"true"

    def result(self) -> HostEvents:
        """The launches and waits, each sorted by begin time."""
        launches = sorted((c for c in self.calls if c.name in LAUNCH_NAMES), key=_by_time)
        waits = sorted((c for c in self.calls if c.name not in LAUNCH_NAMES), key=_by_time)
        return HostEvents(tuple(launches), tuple(waits), self.overflow, self.unparsed)


def _by_time(call: HostCall) -> tuple[int, int]:
    return call.begin_ns, call.end_ns


def _event_regions(path: Path, chunk_bytes: int) -> Iterator[bytes]:
    """Yields consecutive pieces of the file, each ending just after a ``}``.

    An event object without nested objects contains no ``}``, so one that is cut by a chunk
    boundary lies wholly after the last ``}`` of the chunk and travels to the next piece.
    """
    carry = b""
    with open_bytes(path) as handle:
        while chunk := handle.read(chunk_bytes):
            buffer = carry + chunk
            cut = buffer.rfind(b"}") + 1
            yield buffer[:cut]
            carry = buffer[cut:]
    if carry:
        yield carry


def _calls_named(region: bytes, start: int, end: int, needle: bytes, rare: int,
                 names: tuple[str, ...]) -> tuple[list[HostCall], int]:
    """Finds the ``X`` events called one of ``names`` (all starting with ``needle``, found
    through its letter at ``rare`` when that is not -1).

    Returns them and a count of the named events whose times could not be read.
    """
    quoted = [(b'"' + name.encode() + b'"', name) for name in names]
    calls: list[HostCall] = []
    bad = 0
    for pos in needle_positions(region, needle, rare, start, end):
        for text, name in quoted:
            if region.startswith(text, pos) and _NAME_KEY.search(region, max(start, pos - _KEY_LOOKBEHIND), pos):
                call = _parse_call(region, start, end, pos, name)
                if call is None:
                    bad += 1
                elif call is not _NOT_COMPLETE:
                    calls.append(call)
    return calls, bad


def needle_positions(region: bytes, needle: bytes, rare: int, start: int, end: int) -> Iterator[int]:
    """Where ``needle`` starts in ``region[start:end]``: found through its letter at index
    ``rare``, one that is rare in VizTracer reports
    (:func:`~tokentrace.sources._raw.scan.positions`, which goes back to a whole-word search
    where the letter is not rare after all), or with ``rare`` -1 by ``bytes.find``."""
    return positions(region, needle, rare, start, end) if rare >= 0 else _found(region, needle, start, end)


def _found(region: bytes, needle: bytes, start: int, end: int) -> Iterator[int]:
    pos = region.find(needle, start, end)
    while pos >= 0:
        yield pos
        pos = region.find(needle, pos + len(needle), end)


_NOT_COMPLETE = HostCall("", 0, 0)  # marks events that are not complete ("X") events


def _parse_call(region: bytes, lo: int, hi: int, name_pos: int, name: str) -> HostCall | None:
    """Reads ``ts``/``dur``/``ph`` of the event whose ``"name"`` value starts at ``name_pos``.

    The event spans from the last ``{`` before its name to the first ``{`` or ``}`` after it
    (VizTracer writes scalar fields first and ``args``, if any, last).
    """
    start = region.rfind(b"{", lo, name_pos)
    stops = [p for p in (region.find(b"}", name_pos, hi), region.find(b"{", name_pos, hi)) if p >= 0]
    stop = min(stops) if stops else hi
    event = region[start + 1 : stop]
    phase, ts, dur = _PH.search(event), _TS.search(event), _DUR.search(event)
    if phase is None or phase.group(1) != b"X":
        return _NOT_COMPLETE  # another phase, or a nested dict such as M-event args
    if start < 0 or ts is None or dur is None:
        return None
    begin_ns = _us_to_ns(ts.group(1))
    return HostCall(name, begin_ns, begin_ns + _us_to_ns(dur.group(1)))


def _us_to_ns(text: bytes) -> int:
    """JSON microseconds to ns: exact for plain decimals, through float for exponent forms."""
    value = text.decode()
    return us_to_ns(float(value)) if "e" in value or "E" in value else us_to_ns(value)
