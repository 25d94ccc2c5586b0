"""tokenspeed's linked scopes (tokenspeed #740): the ``viztracer->proton`` flow starts of a
VizTracer report, as the merge names and numbers them.

tokenspeed-kernel's ``kernel_scope`` adds, just before it enters a Proton scope, a flow start to
the VizTracer report: ``{"name": "viztracer->proton", "cat": "tokenspeed.proton", "ph": "s",
"ts": <VizTracer µs>, "id": <Proton scope id>, "bp": "e"}`` (pid/tid filled by VizTracer). The
Proton scope carries the same id as ``args.scope_id``; the merge writes the matching finish on
it, so Perfetto draws Python frame -> Proton scope -> kernel. The starts are found in a report's
bytes by :func:`tokentrace.sources._raw.find_link_starts`.
"""

from __future__ import annotations

LINK_NAME = "viztracer->proton"
LINK_CATEGORY = "tokenspeed.proton"
# Link ids in a combined file: tokenspeed's own namespace, 2^52 | rank << 32 | scope id, so the
# same scope id on two ranks stays two flows.
LINK_NAMESPACE = 1 << 52


def combined_link_id(rank_index: int, scope_id: int) -> int:
    """The id of a link in a combined file (``rank_index``: the rank's position in it)."""
    return LINK_NAMESPACE | (rank_index << 32) | scope_id
