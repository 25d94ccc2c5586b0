"""tokenspeed's linked scopes (tokenspeed #740): the ``viztracer->proton`` flow starts of a
VizTracer report.

tokenspeed-kernel's ``kernel_scope`` adds, just before it enters a Proton scope, a flow start to
the VizTracer report: ``{"name": "viztracer->proton", "cat": "tokenspeed.proton", "ph": "s",
"ts": <VizTracer µs>, "id": <Proton scope id>, "bp": "e"}`` (pid/tid filled by VizTracer). The
Proton scope carries the same id as ``args.scope_id``; the merge writes the matching finish on
it, so Perfetto draws Python frame -> Proton scope -> kernel. This module finds the starts with
a ``find`` over the report's bytes (no parse of other events); the merge reads them only for a
rank whose Proton scopes carry scope ids, while the host copy runs in its child (off the
critical path: the needle search alone is ~12 ms over a 55 MB report).
"""

from __future__ import annotations

import mmap
import re
from dataclasses import dataclass
from pathlib import Path

from tokentrace.sources.fileio import is_gzip, iter_chunks

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
        self._feed(region, start, end, start, end, end)

    def feed_starts(self, region, start: int, end: int) -> None:
        """Collects the link starts whose name starts in ``region[start:end]``, each event read
        whole from ``region`` (a whole report: no event is cut)."""
        self._feed(region, start, end, 0, len(region), min(end + len(LINK_NEEDLE) - 1, len(region)))

    def _feed(self, region, start: int, end: int, lo: int, hi: int, search_end: int) -> None:
        """The starts whose name starts in ``[start, end)`` (found up to ``search_end``), each
        event read from ``[lo, hi)``."""
        pos = region.find(LINK_NEEDLE, start, search_end)
        while 0 <= pos < end:
            open_at = region.rfind(b"{", lo, pos)
            close_at = region.find(b"}", pos, hi)
            event = region[open_at + 1 : close_at if close_at >= 0 else hi]
            if _PH.search(event):
                found = LINK_ID_RE.search(event)
                if found and open_at >= 0:
                    self.ids.add(int(found.group(1)))
                else:
                    self.unparsed += 1
            pos = region.find(LINK_NEEDLE, pos + len(LINK_NEEDLE), search_end)

    def result(self) -> LinkStarts:
        """What was found."""
        return LinkStarts(frozenset(self.ids), self.unparsed)


# Bytes of a mapped report searched before the pages behind are let go (see _mapped_starts).
MAPPED_WINDOW_BYTES = 8 << 20


def read_link_starts(path: Path) -> LinkStarts:
    """The link starts of a VizTracer report: a plain one searched in place (memory-mapped), a
    gzip one inflated in chunks."""
    if not is_gzip(path):
        return _mapped_starts(path)
    collector = LinkStartsCollector()
    carry = b""
    for chunk in iter_chunks(path):
        data = carry + chunk
        cut = data.rfind(b"}") + 1  # no event is cut: the rest travels to the next chunk
        collector.feed(data, 0, cut)
        carry = data[cut:]
    if carry:
        collector.feed(carry, 0, len(carry))
    return collector.result()


def _mapped_starts(path: Path) -> LinkStarts:
    """The link starts of a plain report, searched in its memory map window by window.

    No byte is copied: reading the report in chunks and joining each chunk to the previous
    one's rest took 51-53 ms for t39 TP0's 55 MB, the mapped search 18 ms (in process, three
    runs each). An event cut by a window's end is read whole (the map is one buffer); the pages
    behind each window are dropped from this process (the page cache keeps them), so its
    resident memory grows by one window, not by the report.
    """
    collector = LinkStartsCollector()
    with open(path, "rb") as handle:
        size = handle.seek(0, 2)
        if not size:
            return collector.result()
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            start = 0
            while start < size:
                end = min(start + MAPPED_WINDOW_BYTES, size)
                # a needle is found where it starts: the window's end does not cut one
                collector.feed_starts(data, start, end)
                if hasattr(mmap, "MADV_DONTNEED"):
                    behind = start - start % mmap.PAGESIZE
                    data.madvise(mmap.MADV_DONTNEED, behind, end - behind)
                start = end
    return collector.result()
