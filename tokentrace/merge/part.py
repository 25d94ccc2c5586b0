"""A rank's part of the combined file, written by the worker that merged the rank.

``merge --combine`` copies it (and the rank's host events from its per-rank file,
:mod:`.host_span`) when the rank's host axis is the combined one and its host ids collide with
no other rank's, so the combined file costs a copy per rank rather than a parse of every host
event; the worker has the rank's Proton rows laid out already, and writes the part in parallel
with the other ranks' merges.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from tokentrace.align.policy import Alignment
from tokentrace.merge.gpu_events import ProtonRows
from tokentrace.merge.host_copy import CopiedHost
from tokentrace.merge.ids import FRESH_ID_START, flow_base, rank_ids
from tokentrace.merge.metadata import host_process_events
from tokentrace.merge.rank_events import CombinedPart, RankPlacement, rank_events, write_joined
from tokentrace.runtime.files import open_for_writing
from tokentrace.sources.discover import RankFiles
from tokentrace.sources.links import LinkStarts, combined_link_id
from tokentrace.sources.vizscan import positions


@dataclasses.dataclass(frozen=True)
class PartRequest:
    """Where a rank's part of the combined file goes: ``path``, for the rank at ``index``."""

    path: Path
    index: int


def write_part(part: PartRequest, files: RankFiles, output: Path, host: CopiedHost, rows: ProtonRows,
               alignment: Alignment, links: LinkStarts, host_span: tuple[int, int]) -> CombinedPart | None:
    """Writes the rank's part of the combined file (:class:`CombinedPart`) beside its per-rank
    file ``output``; None when the rank must be rewritten there instead: host ids in the
    fresh-id range or not all named by the report's metadata, escaped characters, link starts
    the scan could not read, more GPU threads than the rank's id range holds, or the part could
    not be written (the combined file's own write then says why)."""
    viz = host.viz
    host_ids = viz.pids | viz.tids
    if links.unparsed or max(host_ids, default=0) >= FRESH_ID_START \
            or not copyable_span(output, host_span, viz.pids, viz.tids):
        return None
    place = RankPlacement(alignment.offset_ns, sort_index=2 * part.index)
    try:
        proton = rows.serialise(place.proton_shift_ns, rank_ids(part.index, host_ids),
                                {i: combined_link_id(part.index, i) for i in links.ids}, flow_base(part.index))
    except OverflowError:
        return None
    placed = rank_events(files, viz, alignment, place, proton)
    placed.result.link_starts = len(links.ids)
    events = host_process_events(placed.result.tag, sorted(viz.pids), viz.main_pid, place.sort_index)
    try:
        with open_for_writing(part.path) as out:
            write_joined(out.write, events + placed.events, after_host=False)
    except OSError:
        part.path.unlink(missing_ok=True)
        return None
    return CombinedPart(part.path, placed.result.record(), host_span, frozenset(host_ids),
                        frozenset(links.ids), bool(rows.scope_ids), viz.kept)


_SCAN_BYTES = 8 << 20
_OVERLAP = 256  # longer than any match below, so none is missed at a chunk's edge
# A printable ASCII character written as a \u escape: Python's json never writes one (VizTracer's
# reports hold none), and the copy looks for link starts by their name's plain bytes.
_ESCAPE = b"\\u00"
_ESCAPED_PRINTABLE = re.compile(rb"\\u00[2-7][0-9a-fA-F]")


def copyable_span(path: Path, span: tuple[int, int], pids: set[int], tids: set[int]) -> bool:
    """Whether the rank's host bytes can be copied into the combined file as they are: every
    ``"pid"``/``"tid"`` value is one the scan found (it takes them from VizTracer's metadata
    events, which name every process and thread VizTracer traced; another writer's report may
    use more, which could be another rank's) and no printable character is escaped (a link
    start's name or keys written so would be missed).

    Cost per chunk: one regex search for both keys, from their common literal ``id"`` (sre
    skips to a literal prefix with a fast search; each key is then told by a look-behind), so
    the bytes are read once, not once per key; the escapes are found through their backslash
    (``bytes.find`` of one byte is memchr; VizTracer writes few), not by a regex, which sre
    tries at every byte. An alternation of the keys' whole patterns has no literal prefix, so
    sre would try all of it at every byte."""
    unknown = re.compile(rb'id"(?:(?<="pid")' + _unknown(pids) + rb'|(?<="tid")' + _unknown(tids) + rb")")
    position, end = span
    with open(path, "rb") as source:
        while position < end:
            start = max(span[0], position - _OVERLAP)
            data = os.pread(source.fileno(), min(_SCAN_BYTES, end - position) + position - start, start)
            if not data:
                return False
            position = start + len(data)
            # a match in the last _OVERLAP bytes may be a value cut short: the next chunk,
            # which starts before it, decides
            limit = len(data) if position >= end else len(data) - _OVERLAP
            found = unknown.search(data)
            if (found is not None and found.start() < limit) or _escaped_printable(data, limit):
                return False
    return True


def _escaped_printable(data: bytes, limit: int) -> bool:
    """Whether a printable character's ``\\u00XX`` escape starts before ``limit``."""
    return any(_ESCAPED_PRINTABLE.match(data, at) for at in positions(data, _ESCAPE, 0, 0, limit))


def _unknown(known: set[int]) -> bytes:
    """A regex for what follows a ``"pid"``/``"tid"`` key whose value is not one of ``known``."""
    values = b"|".join(str(v).encode() for v in sorted(known))
    return rb"\s*+:\s*+" + (rb"(?!(?:" + values + rb")[\s,}])" if values else b"")
