"""Annotating a merged trace file: the library calls behind ``tokentrace view`` and the annotated
traces of ``tokentrace analyze`` (:func:`annotate_with_gaps`, from the gaps its run found).

The annotations are recorded in the file's ``tokentrace`` block as ``"annotated": {...}``
(:func:`annotation_record`): the settings, what was written, the tids of the new tracks and the
length of the inserted text. Annotating again with the same settings and tool version changes
nothing; other settings replace the earlier annotations (cut by that length, so the result is
the bytes a plain merged file would give).
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from tokentrace.annotate.events import CATEGORY, TRACK_NAME, build_events
from tokentrace.annotate.gaps import Gap, find_gaps, used_ids
from tokentrace.annotate.layout import MergedTail, read_tail
from tokentrace.annotate.splice import rewrite
from tokentrace.catalog import effective_params, find_query, open_trace
from tokentrace.errors import InputError
from tokentrace.options import EngineOptions
from tokentrace.version import tool_version

MARKER = "annotated"
_HEAD = b'{"args":{"name":"' + TRACK_NAME.encode() + b'"},"name":"thread_name"'


@dataclasses.dataclass(frozen=True)
class AnnotationResult:
    """What :func:`annotate_file` did.

    Attributes:
        path: the annotated trace.
        written: False when the file already held these annotations (nothing was rewritten).
        slices: gap slices in the file (all ranks).
        flows: stall flows in the file (host slice -> gap slice).
        stalls: gaps that are stalls (``is_stall``; those without a host slice get no flow).
        ranks: the rank tags annotated, in file order.
        min_gap_us: shortest gap with a slice, µs.
        stall_min_us: shortest steady host-caused gap called a stall, µs.
        seconds: wall time of the call.
        gaps: the annotations written (empty when ``written`` is False).
    """

    path: Path
    written: bool
    slices: int
    flows: int
    stalls: int
    ranks: tuple[str, ...]
    min_gap_us: float
    stall_min_us: float
    seconds: float
    gaps: tuple[Gap, ...] = ()


def annotate_file(merged_path: str | os.PathLike, output_path: str | os.PathLike | None = None,
                  min_gap_us: float | None = None, *, stall_min_us: float | None = None,
                  engine: EngineOptions | None = None) -> AnnotationResult:
    """Runs ``gap_causes`` on a merged trace and writes it with the "GPU idle (tokentrace)"
    tracks (docs/view.md).

    Args:
        merged_path: a per-rank or combined file of ``tokentrace merge`` (``.json`` or gzip).
        output_path: where to write (None: replace ``merged_path``, atomically). gzip when its
            name ends in ``.gz``; in place, as the input is.
        min_gap_us: shortest gap that gets a slice, µs (None: gap_causes' ``min_gap_us``
            default, 100).
        stall_min_us: gap_causes' ``stall_min_us`` (None: its default, 2000): stalls get a flow.
        engine: the trace processor that runs the query (default: the embedded one).

    Raises:
        InputError: not a merged trace, unreadable, or the output cannot be written.
        EngineError, QueryError: the trace processor failed.
    """
    start = time.perf_counter()
    source = Path(merged_path)
    target = Path(output_path) if output_path is not None else source
    tail = read_tail(source)
    check_annotatable(tail)
    settings = _settings(min_gap_us, stall_min_us)
    previous = tail.block.get(MARKER)
    if _same(previous, settings):
        if not _same_file(source, target):
            rewrite(tail, target, _compress(tail, target, output_path), [], lambda _: tail.block)
        return _reused(target, previous, time.perf_counter() - start)
    with open_trace(source, engine, warn=False) as loaded:
        gaps = find_gaps(loaded, settings["min_gap_us"], settings["stall_min_us"])
        used = used_ids(loaded)
    return _write(tail, target, _compress(tail, target, output_path), gaps, used, settings, start)


def annotate_with_gaps(merged_path: str | os.PathLike, output_path: str | os.PathLike,
                       gaps: list[Gap], used: set[int], *, min_gap_us: float,
                       stall_min_us: float) -> AnnotationResult:
    """Writes ``merged_path`` with the annotations of ``gaps`` into ``output_path``, from gaps
    found already (``tokentrace analyze``'s ``gap_causes`` rows and
    :func:`~tokentrace.annotate.gaps.annotation_support`: :func:`~tokentrace.annotate.gaps.gaps_from_rows`),
    with no engine: the file is copied, never loaded. ``used``: the pids and tids of the file
    (the new tracks take none of them); ``min_gap_us`` and ``stall_min_us``: the settings the
    gaps were found with (recorded in the block). gzip when the output's name ends in ``.gz``.

    Raises:
        InputError: not a merged trace, unreadable, or the output cannot be written.
    """
    start = time.perf_counter()
    source, target = Path(merged_path), Path(output_path)
    tail = read_tail(source)
    check_annotatable(tail)
    settings = {"min_gap_us": min_gap_us, "stall_min_us": stall_min_us}
    return _write(tail, target, target.name.endswith(".gz"), list(gaps), set(used), settings, start)


def _write(tail: MergedTail, target: Path, compress: bool, gaps: list[Gap], used: set[int],
           settings: dict, start: float) -> AnnotationResult:
    """Writes the trace of ``tail`` with ``gaps`` drawn in (an earlier annotation replaced:
    its bytes cut, its tids free again)."""
    previous = tail.block.get(MARKER)
    events = build_events(gaps, used - _earlier_tids(previous))
    stalls = sum(g.is_stall for g in gaps)
    strip = int(previous["bytes"]) if isinstance(previous, dict) else 0

    def block(inserted: int) -> dict:
        marker = {**settings, "version": tool_version(), "track": TRACK_NAME, "category": CATEGORY,
                  "slices": events.slices, "flows": events.flows, "stalls": stalls, "bytes": inserted,
                  "ranks": {rank: {"tids": tids} for rank, tids in events.tids.items()}}
        return {**tail.block, MARKER: marker}

    rewrite(tail, target, compress, events.texts, block, strip, _HEAD)
    return AnnotationResult(target, True, events.slices, events.flows,
                            stalls, tuple(events.tids),
                            settings["min_gap_us"], settings["stall_min_us"],
                            time.perf_counter() - start, tuple(gaps))


def remove_annotations(merged_path: str | os.PathLike,
                       output_path: str | os.PathLike | None = None) -> Path:
    """Writes the trace without its annotations (the bytes of the plain merged file); returns
    the path written. A file without annotations is left as it is (or copied to
    ``output_path``).

    Raises:
        InputError: not a merged trace, unreadable, or the output cannot be written.
    """
    source = Path(merged_path)
    target = Path(output_path) if output_path is not None else source
    tail = read_tail(source)
    previous = tail.block.get(MARKER)
    if not isinstance(previous, dict) and _same_file(source, target):
        return target
    strip = int(previous["bytes"]) if isinstance(previous, dict) else 0
    block = {k: v for k, v in tail.block.items() if k != MARKER}
    rewrite(tail, target, _compress(tail, target, output_path), [], lambda _: block, strip, _HEAD)
    return target


def annotation_record(merged_path: str | os.PathLike) -> dict | None:
    """The ``"annotated"`` record of a merged trace's ``tokentrace`` block; None when the file
    carries no annotations.

    Raises:
        InputError: not a merged trace, or unreadable.
    """
    record = read_tail(Path(merged_path)).block.get(MARKER)
    return record if isinstance(record, dict) else None


def _settings(min_gap_us: float | None, stall_min_us: float | None) -> dict:
    """The gap_causes parameters as the query resolves them (defaults from its call)."""
    given = {k: v for k, v in (("min_gap_us", min_gap_us), ("stall_min_us", stall_min_us))
             if v is not None}
    used = effective_params(find_query("gap_causes"), given)
    return {"min_gap_us": used["min_gap_us"], "stall_min_us": used["stall_min_us"]}


def _same(previous: object, settings: dict) -> bool:
    return (isinstance(previous, dict) and previous.get("version") == tool_version()
            and all(previous.get(k) == v for k, v in settings.items()))


def _earlier_tids(previous: object) -> set[int]:
    """The tids an earlier annotation took (free again once it is replaced)."""
    if not isinstance(previous, dict):
        return set()
    ranks = previous.get("ranks") or {}
    return {int(t) for r in ranks.values() if isinstance(r, dict) for t in r.get("tids", ())}


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def _compress(tail: MergedTail, target: Path, output_path: object) -> bool:
    return tail.compressed if output_path is None else target.name.endswith(".gz")


def _reused(path: Path, record: dict, seconds: float) -> AnnotationResult:
    ranks = record.get("ranks") or {}
    return AnnotationResult(path, False, int(record.get("slices", 0)), int(record.get("flows", 0)),
                            int(record.get("stalls", 0)), tuple(ranks), record["min_gap_us"], record["stall_min_us"], seconds)


def check_annotatable(tail: MergedTail) -> None:
    """Refuses a merged file whose block names no rank (nothing to annotate).

    Raises:
        InputError: the block has no ranks.
    """
    if not tail.block.get("ranks"):
        raise InputError(f"{tail.path}: its 'tokentrace' block lists no rank; merge again")
