"""Estimate the clock offset of a rank's Proton trace from the traces themselves (issue 5).

``proton_ns + offset_ns = viz_ns``. The k-th Triton launch call in the VizTracer report is paired
with the k-th Triton kernel in Proton; causality then bounds the offset from both sides (see
:mod:`tokentrace.align.bounds` and ``docs/alignment.md``):

* ``lo_ns``: no kernel starts before the call that launched it began;
* ``hi_ns``: no GPU wait returns before the kernels enqueued before it ended.

The point estimate is ``lo_ns`` plus a typical launch latency, kept inside ``[lo_ns, hi_ns]``.
Two sequences can be aligned in several ways (host trace overflowed, warm-up kernels, launches
outside the Proton window); every plausible alignment is tried and only one that is consistent
(``lo <= hi``) and unambiguous is accepted. Otherwise the estimator refuses, with a reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokentrace.align.bounds import KernelIndex, KernelRow, index_kernels, match_launches
from tokentrace.align.candidates import MIN_MATCHES, Candidate, evaluate_all
from tokentrace.align.replays import GraphRuns, graph_runs, replay_matchings
from tokentrace.sources.host_calls import (
    LAUNCH_NAMES,
    STREAM_WAIT_NAMES,
    HostCall,
    HostEvents,
    read_host_events,
)

# Smallest launch latency seen from a Triton launch call's begin to its kernel's start, i.e.
# anchored offset - lo_ns, measured on the anchored real traces (H200, triton 3.9, Proton
# hooks on): 26, 26, 29 and 47 us. Adding it to lo_ns lands within 12 us of the anchors there,
# where the interval midpoint is 60-880 us off (the upper bounds are much looser).
TYPICAL_LAUNCH_LATENCY_NS = 35_000
# Alignments tried around "first with first" and "last with last" (missing events at the ends).
SHIFT_WINDOW = 3
# Several alignments consistent with every bound: their union is the interval, unless it is wider
# than this, where the offset would misplace whole launch latencies (refused as ambiguous).
MAX_AMBIGUOUS_WIDTH_NS = 200_000
# Default slack of check_anchor: clock reads behind the two anchors are a few us apart.
ANCHOR_TOLERANCE_NS = 20_000

# Kernel names that are not Triton kernels: C++ mangled (_Z...), cuBLAS/cuBLASLt, CUTLASS,
# cuDNN and NCCL families. Triton kernels carry the bare name of their @triton.jit function.
_NOT_TRITON = re.compile(
    r"^(_Z|nvjet|sm\d+_|ampere_|volta_|turing_|hopper_|maxwell_|cutlass|cublas|cudnn|nccl|"
    r"gemv|gemm|splitK|void\b)"
)


@dataclass(frozen=True)
class OffsetEstimate:
    """The result of the estimator (also written to the merged file's ``tokentrace`` block).

    Attributes:
        offset_ns: ``proton_ts_ns + offset_ns`` = VizTracer timeline ns; None when refused.
        lo_ns: the true offset provably lies in ``[lo_ns, hi_ns]`` given the matches used.
        hi_ns: see ``lo_ns``.
        n_matches: launch/kernel pairs plus waits used.
        method: the evidence used, ``"launch-order+sync"``, ``"graph-replay+sync"``,
            ``"launch-order+graph-replay+sync"``, or ``"refused"``.
        reason: why refused, or a one-line summary of the evidence.
        n_launch_pairs: matched Triton launch/kernel pairs.
        n_waits: waits whose upper bound was used.
        n_waits_ignored: waits whose bound contradicted the launches (not GPU waits).
        shift: the alignment used: launch ``i`` <-> Triton kernel ``i + shift`` (0 when the two
            sequences start together; ``n_kernels - n_launches`` when they end together).
        n_replays: CUDA-graph replay calls paired with their replay's kernels.
        lo_by: the call that gave ``lo_ns`` (kind and name); ``hi_by``: the wait giving ``hi_ns``.
    """

    offset_ns: int | None
    lo_ns: int | None
    hi_ns: int | None
    n_matches: int
    method: str
    reason: str
    n_launch_pairs: int = 0
    n_waits: int = 0
    n_waits_ignored: int = 0
    shift: int | None = None
    n_replays: int = 0
    lo_by: str = ""
    hi_by: str = ""

    @property
    def refused(self) -> bool:
        """True when no offset could be given."""
        return self.offset_ns is None


def is_triton_kernel_name(name: str) -> bool:
    """True for a kernel name that looks like a ``@triton.jit`` function (a bare identifier)."""
    return name.isidentifier() and not _NOT_TRITON.match(name)


@dataclass(frozen=True)
class KernelEvidence:
    """The kernel side of an estimate, built from the kernels alone (:func:`prepare_kernels`),
    so that a merge builds it while its host copy runs: sorting and indexing the kernels and
    telling the Triton ones is about half of an estimate's work and needs nothing from the
    host side, so it need not wait for the copy.

    Attributes:
        index: the kernels sorted by start, with their per-stream arrays.
        triton: the positions in ``index`` of the Triton kernels.
        runs: the CUDA-graph replays seen on the GPU (none when the trace tells no graph kernel).
    """

    index: KernelIndex
    triton: tuple[int, ...]
    runs: GraphRuns = GraphRuns({})


def prepare_kernels(kernels: Sequence[KernelRow],
                    is_triton: Callable[[str], bool] = is_triton_kernel_name) -> KernelEvidence:
    """Indexes ``kernels`` (rows as :func:`estimate_offset` takes them) and picks out the Triton
    ones with ``is_triton``."""
    index = index_kernels(kernels)
    # a kernel replayed from a graph had no launch call of its own: never paired with one
    graph = index.in_graph or (False,) * len(index.names)
    return KernelEvidence(index, tuple(k for k, name in enumerate(index.names) if is_triton(name) and not graph[k]),
                          graph_runs(index))


def estimate_offset(viz_path: Path, kernels: Sequence[KernelRow] | KernelEvidence, *,
                    is_triton: Callable[[str], bool] = is_triton_kernel_name,
                    launch_latency_ns: int = TYPICAL_LAUNCH_LATENCY_NS) -> OffsetEstimate:
    """Estimates the offset of one rank from its VizTracer report and its Proton kernels.

    Args:
        viz_path: the rank's ``.viztracer.json`` (plain or gzip); only launch and wait calls are
            read from it, by streaming.
        kernels: every kernel of the rank, ``(name, start_ns, end_ns)`` in Proton time, or
            ``(name, start_ns, end_ns, stream)``: with stream ids the upper bound also uses the
            non-Triton kernels of the waited stream (tighter, and sound with several streams);
            or those rows already prepared (:func:`prepare_kernels`).
        is_triton: tells Triton kernels by name (prepared kernels were told apart already).
        launch_latency_ns: added to the lower bound for the point estimate.

    Returns:
        The estimate; ``offset_ns`` is None (and ``reason`` says why) when it refuses.
    """
    host = read_host_events(Path(viz_path))
    prepared = kernels if isinstance(kernels, KernelEvidence) else prepare_kernels(kernels, is_triton)
    return estimate_from_events(host, prepared, launch_latency_ns=launch_latency_ns,
                                replays=replay_calls_for(viz_path, prepared))


def replay_calls_for(viz_path: Path, prepared: KernelEvidence) -> tuple[HostCall, ...]:
    """The report's graph replay calls when the GPU side holds replays, else none: a second
    streaming read of the report, made only for ranks that replay graphs."""
    if not prepared.runs.by_stream:
        return ()
    from tokentrace.align.replays import read_replay_calls

    return read_replay_calls(Path(viz_path))


def estimate_from_events(host: HostEvents, kernels: Sequence[KernelRow] | KernelEvidence, *,
                         is_triton: Callable[[str], bool] = is_triton_kernel_name,
                         launch_latency_ns: int = TYPICAL_LAUNCH_LATENCY_NS,
                         replays: Sequence[HostCall] = ()) -> OffsetEstimate:
    """Like :func:`estimate_offset`, from host events already read (pure).

    ``replays``: the report's CUDA-graph replay calls (:func:`~.replays.read_replay_calls`),
    paired with the runs of graph kernels (:mod:`.replays`) beside the Triton launches.
    """
    prepared = kernels if isinstance(kernels, KernelEvidence) else prepare_kernels(kernels, is_triton)
    index, triton = prepared.index, prepared.triton
    counts = f"{len(host.launches)} Triton launches, {len(triton)} Triton kernels"
    launches_enough = min(len(host.launches), len(triton)) >= MIN_MATCHES
    graph = list(replay_matchings(tuple(replays), prepared.runs))
    if graph:
        counts += f", {len(replays)} graph replay calls, {prepared.runs.count} replays on the GPU"
    if not launches_enough and not graph:
        return _refusal(f"too little evidence: {counts} (need {MIN_MATCHES})")
    by_launch = ([match_launches(host.launches, triton, shift)
                  for shift in _shifts(len(host.launches), len(triton))] if launches_enough else [None])
    candidates = evaluate_all(by_launch, graph or [None], index, host)
    accepted = [c for c in candidates if c.acceptable]
    if not accepted:
        return _refusal(_inconsistency(candidates, counts))
    accepted.sort(key=lambda c: c.bounds.contradicting)
    best = [c for c in accepted if c.bounds.contradicting == accepted[0].bounds.contradicting]
    lo, hi = min(c.lo for c in best), max(c.bounds.hi for c in best)
    if len(best) > 1 and hi - lo > MAX_AMBIGUOUS_WIDTH_NS:
        shifts = ", ".join(str(c.matching.shift) for c in best[:8]) + (", ..." if len(best) > 8 else "")
        return OffsetEstimate(None, lo, hi, 0, "refused",
                              f"ambiguous: alignments {shifts} of {counts} are all consistent, and "
                              f"together they leave [{lo}, {hi}] ns ({(hi - lo) / 1000:.1f} us wide)")
    return _estimate(best, launch_latency_ns, host)


def check_anchor(estimate: OffsetEstimate, anchored_offset_ns: int,
                 tolerance_ns: int = ANCHOR_TOLERANCE_NS) -> bool | None:
    """Whether an anchor-derived offset agrees with the traces' causality.

    Args:
        estimate: the estimate of the same rank.
        anchored_offset_ns: ``proton.baseTimeNanoseconds - viz.baseTimeNanoseconds``.
        tolerance_ns: slack on both sides of the interval (the anchors' own clock reads).

    Returns:
        True when the anchored offset lies in ``[lo_ns - tol, hi_ns + tol]``, False when outside
        (broken clocks or anchors), None when the estimate has no interval.
    """
    if estimate.lo_ns is None or estimate.hi_ns is None:
        return None
    return estimate.lo_ns - tolerance_ns <= anchored_offset_ns <= estimate.hi_ns + tolerance_ns


def _shifts(n_launches: int, n_triton: int) -> list[int]:
    """Alignments to try: around first-with-first (0) and last-with-last (n_triton - n_launches)."""
    ends = n_triton - n_launches
    near = {base + d for base in (0, ends) for d in range(-SHIFT_WINDOW, SHIFT_WINDOW + 1)}
    return sorted(near, key=lambda s: (abs(s - ends), s))


def _estimate(best: Sequence[Candidate], launch_latency_ns: int, host: HostEvents) -> OffsetEstimate:
    """The estimate from the accepted candidates: one, or several whose union is narrow."""
    first = best[0]
    lo, hi = min(c.lo for c in best), max(c.bounds.hi for c in best)
    low, high = min(best, key=lambda c: c.lo), max(best, key=lambda c: c.bounds.hi)
    b = first.bounds
    calls = first.matching.launches
    n_replays = sum(1 for call in set(calls) if call.name not in LAUNCH_NAMES)
    pairs = len(calls) - n_replays
    offset = min(lo + launch_latency_ns, hi)
    lo_by, hi_by = _call_kind(low.lo_by, low.lo != low.causal_lo), _call_kind(high.bounds.by)
    notes = [f"{pairs} launch/kernel pairs (alignment {first.matching.shift:+d})" if pairs else
             "no Triton launch paired", f"{n_replays} graph replays", f"{b.kept} GPU waits",
             f"lower bound from {lo_by}, upper bound from {hi_by}",
             f"interval {(hi - lo) / 1000:.1f} us wide"]
    if low.lo != low.causal_lo:
        notes.append(f"causality alone: lower bound {(lo - low.causal_lo) / 1000:.1f} us lower")
    if len(best) > 1:
        notes.append(f"union of {len(best)} consistent alignments")
    if b.contradicting:
        notes.append(f"{b.contradicting} waits ignored (returned before kernels launched "
                     "before them: not GPU waits)")
    if host.overflow:
        notes.append("VizTracer overflowed (matched from the end)")
    method = "+".join(part for part, used in (("launch-order", pairs), ("graph-replay", n_replays)) if used)
    return OffsetEstimate(offset, lo, hi, pairs + n_replays + b.kept, method + "+sync", "; ".join(notes),
                          pairs, b.kept, b.contradicting, first.matching.shift if pairs else None,
                          n_replays, lo_by, hi_by)


def _call_kind(call: HostCall | None, submitted: bool = False) -> str:
    """How the evidence names a bounding call: its kind and name (``submitted``: the bound is
    the graph's submission at the call's end, not the call's begin)."""
    if call is None:
        return "none"
    if submitted:
        return f"graph replay end ({call.name.split(' (')[0]} returned, graph submitted)"
    if call.name in LAUNCH_NAMES:
        return f"Triton launch ({call.name})"
    if call.waits_for_device:
        return f"device sync ({call.name})"
    if call.name in STREAM_WAIT_NAMES:
        return f"stream wait ({call.name})"
    return f"graph replay ({call.name.split(' (')[0]})"


def _inconsistency(candidates: Sequence[Candidate], counts: str) -> str:
    """Says why no alignment was accepted, with the figures of the most plausible one."""
    first = candidates[0]  # last-with-last, the most plausible one
    if all(c.bounds.hi is None and not c.bounds.contradicting for c in candidates):
        return f"no GPU wait (Tensor.cpu/.item/.tolist/synchronize) bounds the offset ({counts})"
    b = first.bounds
    return (f"inconsistent evidence: no alignment of {counts} is causally consistent; "
            f"last-with-last gives lower bound {first.lo} ns, and {b.contradicting} of "
            f"{b.kept + b.contradicting} waits return before kernels launched before them")


def _refusal(reason: str) -> OffsetEstimate:
    return OffsetEstimate(None, None, None, 0, "refused", reason)
