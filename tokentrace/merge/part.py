"""A rank's part of the combined file, written by the worker that merged the rank.

``merge --combine`` copies it (and the rank's host events from its per-rank file,
:mod:`.host_span`) when the rank's host axis is the combined one and its host ids collide with
no other rank's, so the combined file costs a copy per rank rather than a parse of every host
event; the worker has the rank's Proton rows laid out already, and writes the part in parallel
with the other ranks' merges.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tokentrace.align.policy import Alignment
from tokentrace.merge.gpu_events import ProtonRows
from tokentrace.merge.host_copy import CopiedHost
from tokentrace.merge.ids import FRESH_ID_START, flow_base, rank_ids
from tokentrace.merge.metadata import host_process_events
from tokentrace.merge.rank_events import CombinedPart, RankPlacement, rank_events, write_joined
from tokentrace.runtime.files import open_for_writing
from tokentrace.sources._raw import LinkStarts, find_link_starts
from tokentrace.sources.discover import RankFiles
from tokentrace.sources.links import combined_link_id


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
    not be written (the combined file's own write then says why). The host span's link starts
    are found here, in the worker, for the combined file's copy (:mod:`.host_span`)."""
    viz = host.viz
    host_ids = viz.pids | viz.tids
    if links.unparsed or max(host_ids, default=0) >= FRESH_ID_START:
        return None
    span_links = find_link_starts(output, host_span, (viz.pids, viz.tids))
    if not span_links.copyable:
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
                        frozenset(links.ids), bool(rows.scope_ids), viz.kept, span_links)
