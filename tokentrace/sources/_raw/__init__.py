"""The raw-byte path of VizTracer reports: their events scanned and copied without parsing.

Three calls, and the results they return, are all the rest of tokentrace uses from here:

* :func:`index_report`: what the merge needs to know about a report (:class:`VizInfo`: anchor,
  overflow, pids, tids, earliest time, kept top-level members), its events checked as the copy
  checks them;
* :func:`copy_events`: the same, with the events handed byte for byte to a sink (the per-rank
  merged file);
* :func:`find_link_starts`: tokenspeed's link starts of a report, or of the host events of a
  per-rank file that ``--combine`` copies (:class:`LinkStarts`, :class:`LinkPlace`).

Each has a fast path and a fallback (a full parse); the reading configuration in force
(:func:`tokentrace.sources.backend.current`, which the merge sets from ``MergeOptions.raw``)
holds their switch and sizes. Modules: :mod:`.report` (index and copy,
the fallback), :mod:`.copy` (the copy's ranges and the array's end), :mod:`.scan` (ids, earliest
ts, suspects), :mod:`.check` (the exact check behind the scan), :mod:`.links` and :mod:`.span`
(link starts, and whether a span may be copied as it is).
"""

from tokentrace.sources._raw.links import LinkPlace, LinkStarts, find_link_starts
from tokentrace.sources._raw.report import VizInfo, copy_events, index_report

__all__ = ["LinkPlace", "LinkStarts", "VizInfo", "copy_events", "find_link_starts", "index_report"]
