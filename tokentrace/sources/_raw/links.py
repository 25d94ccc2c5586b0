"""Finding tokenspeed's link starts (:mod:`tokentrace.sources.links`) by their bytes: in a
VizTracer report, read in chunks, or in the host events of a per-rank merged file, which
``--combine`` copies with each start's id namespaced (:mod:`.span`).

The starts are found through their quoted name (no parse of other events); the merge reads a
report for them only for a rank whose Proton scopes carry scope ids, while the host copy runs in
its child, and picks the offset estimator's calls out of the same read where it takes them off
the child (``also``; :mod:`tokentrace.merge.host_copy`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tokentrace.sources import backend
from tokentrace.sources._raw.scan import positions
from tokentrace.sources.fileio import feed_event_ranges, iter_chunks
from tokentrace.sources.links import LINK_NAME

# A link start's name and id as their bytes read.
LINK_NEEDLE = b'"' + LINK_NAME.encode() + b'"'
# Its letter rare in reports (0.02 % of a report's bytes, where its other letters are common):
# memchr finds it (scan.positions).
LINK_NEEDLE_RARE = LINK_NEEDLE.index(b">")
LINK_ID_RE = re.compile(rb'"id"\s*:\s*(\d+)')
_PH = re.compile(rb'"ph"\s*:\s*"s"')


@dataclass(frozen=True)
class LinkPlace:
    """Where one link start lies in a span of a file: the object ``start:end`` and its id's
    digits ``id_start:id_end`` (byte offsets in the file), and that id."""

    start: int
    end: int
    id_start: int
    id_end: int
    scope_id: int


@dataclass(frozen=True)
class LinkStarts:
    """The link starts of one report, or of a span of a per-rank file.

    Attributes:
        ids: the scope ids that flow starts point at.
        unparsed: link events whose ``id`` could not be read (a span: 1 when some start cannot
            be read alone, and the search stopped there).
        places: a span's starts in file order, one per hit of the name (empty for a report).
        copyable: a span asked with ``known_ids``: its bytes may be copied into the combined
            file as they are (:mod:`~tokentrace.sources._raw.span`); None when
            not asked. A span that is not copyable is not searched (no ids, no places).
    """

    ids: frozenset[int] = frozenset()
    unparsed: int = 0
    places: tuple[LinkPlace, ...] = ()
    copyable: bool | None = None


def find_link_starts(path: Path, span: tuple[int, int] | None = None,
                     known_ids: tuple[set[int], set[int]] | None = None,
                     also: Callable[[bytes, int, int], None] | None = None) -> LinkStarts:
    """The link starts of the VizTracer report at ``path`` (plain or gzip, read in chunks of
    ``chunk_bytes`` of :func:`tokentrace.sources.backend.current`), or, with ``span``, of the host events ``(start, end)`` of the
    per-rank merged file at ``path``, with where each lies (:mod:`.span`).

    Args:
        path: the report, or a per-rank file (plain).
        span: the byte offsets of the per-rank file's host events.
        known_ids: with ``span``: the host pids and tids the report's metadata named; the span
            is first checked to be copyable (:attr:`LinkStarts.copyable`, read
            ``span_scan_bytes`` at a time).
        also: a report only: called as ``also(data, start, end)`` with every range read, each
            ending just after a ``}`` (the estimator's calls picked out on the same read).
    """
    if span is not None:
        from tokentrace.sources._raw.span import span_link_starts

        return span_link_starts(path, span, known_ids)
    collector = LinkStartsCollector()
    feed = collector.feed
    if also is not None:
        def feed(data: bytes, start: int, end: int) -> None:
            collector.feed(data, start, end)
            also(data, start, end)
    feed_event_ranges(iter_chunks(path, backend.current().chunk_bytes), feed)
    return collector.result()


class LinkStartsCollector:
    """Collects link starts from ranges of VizTracer bytes, fed in file order; every range ends
    just after a ``}`` (or at the end of the file), so no event is cut.

    Each chunk is searched in place (:func:`~tokentrace.sources.fileio.feed_event_ranges`: cut
    after a ``}``, and a link start is a flat object, whose one ``}`` ends it). Joining every
    chunk to the previous one's rest instead would copy every byte once more (a new ``bytes``
    per chunk). A memory map would copy none, but a report cut short while it is mapped would
    end the merge with SIGBUS.
    """

    def __init__(self) -> None:
        self.ids: set[int] = set()
        self.unparsed = 0

    def feed(self, region: bytes, start: int, end: int) -> None:
        """Collects the link starts of ``region[start:end]``, found through the name's ``>``
        (:func:`~tokentrace.sources._raw.scan.positions`: memchr on a letter rare in reports)."""
        for pos in positions(region, LINK_NEEDLE, LINK_NEEDLE_RARE, start, end):
            open_at = region.rfind(b"{", start, pos)
            close_at = region.find(b"}", pos, end)
            event = region[open_at + 1 : close_at if close_at >= 0 else end]
            if _PH.search(event):
                found = LINK_ID_RE.search(event)
                if found and open_at >= 0:
                    self.ids.add(int(found.group(1)))
                else:
                    self.unparsed += 1

    def result(self) -> LinkStarts:
        """What was found."""
        return LinkStarts(frozenset(self.ids), self.unparsed)
