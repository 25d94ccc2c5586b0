"""The alignments the estimator tries (:mod:`.estimate`), each a pair of an alignment of the
Triton launches and one of the graph replays, evaluated in order: their lower bound from the
paired calls, their upper bound from the GPU waits (:mod:`.bounds`, :mod:`.replays`).

The answer is among the acceptable alignments with the fewest contradicting waits
(:func:`evaluate_all`), so an alignment is given up as soon as it cannot be one of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokentrace.align.bounds import (
    KernelIndex,
    Matching,
    WaitBounds,
    lower_bound_pair,
    running_ends,
    wait_bounds,
    wait_bounds_within,
)
from tokentrace.align.replays import combine, submitted_bound
from tokentrace.sources.host_calls import HostCall, HostEvents

# Fewer matched launch/kernel pairs than this is too little evidence to align on.
MIN_MATCHES = 8
# Share of waits allowed to contradict the lower bound (non-GPU waits such as .cpu() of a host
# tensor); a wrong alignment makes nearly all of them contradict.
MAX_CONTRADICTING_SHARE = 0.1


@dataclass(frozen=True)
class Candidate:
    """One alignment of the launches and one of the replays, with its bounds (``lo_by``: the
    call giving ``lo``)."""

    launch: Matching | None
    replay: Matching | None
    lo: int | None
    lo_by: HostCall | None
    bounds: WaitBounds
    causal_lo: int | None = None
    combined: Matching | None = None

    @property
    def matching(self) -> Matching:
        """Both alignments' pairs as one, in call order: ``combined``, else made when read (for
        an alignment given up, never)."""
        return self.combined or combine(self.launch, self.replay) or Matching((), (), 0)

    @property
    def acceptable(self) -> bool:
        """An upper bound, enough pairs, and few contradicting waits."""
        b = self.bounds
        allowed = int(MAX_CONTRADICTING_SHARE * (b.kept + b.contradicting))
        return (b.hi is not None and len(self.matching.kernels) >= MIN_MATCHES
                and b.contradicting <= allowed)


@dataclass(frozen=True)
class Side:
    """One alignment of the launches or of the replays (None: none), with what every candidate
    made with it reads: its pairs' lower bound (:func:`~tokentrace.align.bounds.lower_bound_pair`)
    and, for the launches, their :func:`~tokentrace.align.bounds.running_ends`."""

    matching: Matching | None
    lower: tuple[int, HostCall, int] | None
    ends: tuple[list[int], list[int]] | None = None

    @classmethod
    def of(cls, matching: Matching | None, index: KernelIndex, launches: bool) -> Side:
        if matching is None:
            return cls(None, None)
        return cls(matching, lower_bound_pair(matching, index), running_ends(matching, index) if launches else None)


def combined_lower(launch: Side, replay: Side) -> tuple[int, HostCall] | None:
    """:func:`~tokentrace.align.bounds.lower_bound_call` of the two alignments combined, from
    each one's own: the larger bound; on a tie, the pair that comes first in the combined order
    (call begin, then kernel position; the launch's on a tie of both: :func:`combine` sorts
    stably, launches first), as the maximum over the combined pairs takes the first."""
    found = [side.lower for side in (launch, replay) if side.lower is not None]
    if not found:
        return None
    best = found[0]
    for other in found[1:]:
        if other[0] > best[0] or (other[0] == best[0] and (other[1].begin_ns, other[2]) < (best[1].begin_ns, best[2])):
            best = other
    return best[0], best[1]


def evaluate_all(by_launch: Sequence[Matching | None], by_replay: Sequence[Matching | None],
                index: KernelIndex, host: HostEvents) -> list[Candidate]:
    """Every pair of a launch and a replay alignment evaluated, in order. The answer is among
    the acceptable ones with the fewest contradicting waits, and an acceptable one has at most
    :data:`MAX_CONTRADICTING_SHARE` of the waits contradicting: an alignment is given up as
    soon as more waits contradict than that, or than an acceptable one found before (a wrong
    alignment makes nearly all of them contradict, and counting them all cost each of its
    rounds over every wait). The first is evaluated whole: a refusal quotes its figures."""
    most = int(MAX_CONTRADICTING_SHARE * len(host.waits))
    replays = [Side.of(replay, index, launches=False) for replay in by_replay]
    found: list[Candidate] = []
    for launch in by_launch:
        launch_side = Side.of(launch, index, launches=True)
        for replay in replays:
            candidate = _evaluate(launch_side, replay, index, host, most if found else None)
            if candidate.acceptable:
                most = min(most, candidate.bounds.contradicting)
            found.append(candidate)
    return found


def _evaluate(launch: Side, replay: Side, index: KernelIndex, host: HostEvents,
              most_contradicting: int | None = None) -> Candidate:
    """The bounds of one alignment of the launches and one of the replays; given up (no upper
    bound, so not acceptable) once more than ``most_contradicting`` waits contradict.

    Stream waits (``Tensor.cpu/.item/.tolist``) bound through the Triton launches only: under
    overlap scheduling they read tensors copied earlier (no wait for the replay just launched),
    so a replay's kernels are proven awaited by device synchronisations alone.
    """
    found = combined_lower(launch, replay)
    if found is None:
        return Candidate(launch.matching, replay.matching, None, None, WaitBounds(None, 0, 0))
    lo, by = found
    bounds = WaitBounds(None, 0, 0)
    if launch.matching is not None:
        bounds = wait_bounds_within(launch.matching, index, host.waits, lo, most_contradicting, launch.ends)
        if bounds is None:  # the launch bounds' count is the candidate's (see _tighter)
            return Candidate(launch.matching, replay.matching, lo, by,
                             WaitBounds(None, 0, most_contradicting + 1), lo)
    matching = combine(launch.matching, replay.matching)
    submitted = None
    if replay.matching is not None:
        device = [wait for wait in host.waits if wait.waits_for_device]
        bounds = _tighter(bounds, wait_bounds(matching, index, device, lo))
        submitted = submitted_bound(matching, index)
    # the graphs' submission (a measured driver behaviour, not causality) tightens the lower
    # bound only where the waits' causal upper bound agrees with it
    if submitted is not None and submitted[0] > lo and (bounds.hi is None or submitted[0] <= bounds.hi):
        lo, by = submitted
    return Candidate(launch.matching, replay.matching, lo, by, bounds, found[0], matching)


def _tighter(first: WaitBounds, second: WaitBounds) -> WaitBounds:
    """The smaller upper bound of the two; the waits used and contradicting of the first (the
    second's waits are among them) unless it has none."""
    best = min((b for b in (first, second) if b.hi is not None), key=lambda b: b.hi, default=first)
    base = first if first.kept or first.contradicting else second
    return WaitBounds(best.hi, base.kept, base.contradicting, best.by)
