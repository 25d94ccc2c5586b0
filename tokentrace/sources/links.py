"""tokenspeed's linked scopes (tokenspeed #740): the ``viztracer->proton`` flow starts of a
VizTracer report.

tokenspeed-kernel's ``kernel_scope`` adds, just before it enters a Proton scope, a flow start to
the VizTracer report: ``{"name": "viztracer->proton", "cat": "tokenspeed.proton", "ph": "s",
"ts": <VizTracer µs>, "id": <Proton scope id>, "bp": "e"}`` (pid/tid filled by VizTracer). The
Proton scope carries the same id as ``args.scope_id``; the merge writes the matching finish on
it, so Perfetto draws Python frame -> Proton scope -> kernel. This module finds the starts with
a ``find`` over the report's bytes (no parse of other events); the merge reads them only for a
rank whose Proton scopes carry scope ids, while the host copy runs in its child (off the
critical path: the needle search reads every byte of the report).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tokentrace.sources.fileio import feed_event_ranges, iter_chunks

LINK_NAME = "viztracer->proton"
LINK_CATEGORY = "tokenspeed.proton"
# Link ids in a combined file: tokenspeed's own namespace, 2^52 | rank << 32 | scope id, so the
# same scope id on two ranks stays two flows.
LINK_NAMESPACE = 1 << 52

# A link start's name and id as their bytes read (the scan here and the copy of
# :mod:`tokentrace.merge.host_span` find the starts by them).
LINK_NEEDLE = b'"' + LINK_NAME.encode() + b'"'
LINK_ID_RE = re.compile(rb'"id"\s*:\s*(\d+)')
_PH = re.compile(rb'"ph"\s*:\s*"s"')


def combined_link_id(rank_index: int, scope_id: int) -> int:
    """The id of a link in a combined file (``rank_index``: the rank's position in it)."""
    return LINK_NAMESPACE | (rank_index << 32) | scope_id


@dataclass(frozen=True)
class LinkStarts:
    """The link starts of one report.

    Attributes:
        ids: the scope ids that flow starts point at.
        unparsed: link events whose ``id`` could not be read.
    """

    ids: frozenset[int] = frozenset()
    unparsed: int = 0


class LinkStartsCollector:
    """Collects link starts from ranges of VizTracer bytes, fed in file order; every range ends
    just after a ``}`` (or at the end of the file), so no event is cut."""

    def __init__(self) -> None:
        self.ids: set[int] = set()
        self.unparsed = 0

    def feed(self, region: bytes, start: int, end: int) -> None:
        """Collects the link starts of ``region[start:end]``."""
        pos = region.find(LINK_NEEDLE, start, end)
        while pos >= 0:
            open_at = region.rfind(b"{", start, pos)
            close_at = region.find(b"}", pos, end)
            event = region[open_at + 1 : close_at if close_at >= 0 else end]
            if _PH.search(event):
                found = LINK_ID_RE.search(event)
                if found and open_at >= 0:
                    self.ids.add(int(found.group(1)))
                else:
                    self.unparsed += 1
            pos = region.find(LINK_NEEDLE, pos + len(LINK_NEEDLE), end)

    def result(self) -> LinkStarts:
        """What was found."""
        return LinkStarts(frozenset(self.ids), self.unparsed)


def read_link_starts(path: Path) -> LinkStarts:
    """The link starts of a VizTracer report (plain or gzip), read in chunks.

    Each chunk is searched in place (:func:`~tokentrace.sources.fileio.feed_event_ranges`: cut
    after a ``}``, and a link start is a flat object, whose one ``}`` ends it). Joining every
    chunk to the previous one's rest instead would copy every byte once more (a new ``bytes``
    per chunk). A memory map would copy none, but a report cut short while it is mapped would
    end the merge with SIGBUS.
    """
    collector = LinkStartsCollector()
    feed_event_ranges(iter_chunks(path), collector.feed)
    return collector.result()
