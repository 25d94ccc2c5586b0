"""Clock offsets between a rank's VizTracer (host) and Proton (GPU) traces.

``offset_ns`` is added to a Proton time (ns from the Proton zero) to place it on the VizTracer
axis (CLOCK_MONOTONIC ns). With both anchors it is exact:
``offset_ns = proton.baseTimeNanoseconds - viz.baseTimeNanoseconds``.

:func:`align` takes what the user asked (:class:`AlignRequest`) and what the rank's files say
(:class:`RankEvidence`: anchors, kernels, the host calls the merge's copy picked out) and
decides alone whether the estimator runs, so no caller has to predict it.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tokentrace.errors import AlignmentError, TokentraceWarning
from tokentrace.options import AlignMode, MergeOptions
from tokentrace.units import us_to_ns

if TYPE_CHECKING:
    from tokentrace.align.estimate import KernelEvidence
    from tokentrace.sources.host_calls import HostEvents


@dataclasses.dataclass(frozen=True)
class Alignment:
    """The offset of one rank and how it was obtained.

    Attributes:
        method: ``anchors``, ``estimated`` or ``offset`` (user-given).
        offset_ns: Proton time + offset_ns = VizTracer time.
        lo_ns: lower bound of the true offset, ``None`` when not computed.
        hi_ns: upper bound, ``None`` when not computed.
        anchor_consistent: anchors agree with the traces' own evidence (``None``: not checked).
        reason: a short note (estimator method, why estimated).
        evidence: which calls bounded the interval (``lower: ...; upper: ...``), "" when none.
    """

    method: str
    offset_ns: int
    lo_ns: int | None = None
    hi_ns: int | None = None
    anchor_consistent: bool | None = None
    reason: str = ""
    evidence: str = ""

    @property
    def width_ns(self) -> int | None:
        """Width of the interval the true offset lies in, None when not computed."""
        return None if self.lo_ns is None or self.hi_ns is None else self.hi_ns - self.lo_ns


@dataclasses.dataclass(frozen=True)
class AlignRequest:
    """What the user asked for the alignment of every rank.

    Attributes:
        mode: ``auto``, ``anchors`` or ``offset`` (``--align``).
        offset_us: the user's ``--offset-us``; given, it wins in ``auto`` too.
        check_anchors: with anchors, also compute the estimator's interval and check them.
    """

    mode: AlignMode = AlignMode.AUTO
    offset_us: float | None = None
    check_anchors: bool = True

    @classmethod
    def from_options(cls, options: MergeOptions) -> AlignRequest:
        """The alignment part of the merge options."""
        return cls(options.align, options.offset_us, options.check_anchors)

    def may_estimate(self) -> bool:
        """Whether :func:`align` may run the estimator, before either anchor is known (so the
        merge's host copy picks out the estimator's calls only when they can be needed)."""
        return self.offset_us is None and self.mode is not AlignMode.OFFSET and (
            self.check_anchors or self.mode is AlignMode.AUTO)

    def requires_anchors(self) -> bool:
        """Whether a missing anchor is an error (``--align anchors`` without ``--offset-us``)."""
        return self.mode is AlignMode.ANCHORS and self.offset_us is None


@dataclasses.dataclass(frozen=True)
class RankEvidence:
    """What one rank's two files say about their clocks.

    Attributes:
        rank: the rank tag, named in warnings.
        viz_path: the VizTracer report (named in errors; read again by the estimator when
            ``host_calls`` is None).
        viz_base_ns: its ``baseTimeNanoseconds`` or ``None``.
        proton_path: the (first) Proton file, named in errors.
        proton_base_ns: its ``baseTimeNanoseconds`` or ``None``.
        kernels: ``(name, start_ns, end_ns, stream)`` in Proton time, for the estimator, or
            those rows already indexed (:func:`tokentrace.align.estimate.prepare_kernels`).
        host_calls: the estimator's launch and wait calls, already picked out of the report by
            the merge's copy (:class:`~tokentrace.sources.host_calls.HostEvents`), else None.
    """

    rank: str
    viz_path: Path
    viz_base_ns: int | None
    proton_path: Path
    proton_base_ns: int | None
    kernels: Sequence[tuple] | KernelEvidence = ()
    host_calls: HostEvents | None = None


def align(request: AlignRequest, evidence: RankEvidence) -> Alignment:
    """Chooses the offset of one rank; runs the estimator only when the choice needs it.

    ``--offset-us`` wins; else both anchors give the offset (checked against the estimator's
    interval unless ``check_anchors`` is off); else ``auto`` estimates it, with a warning.

    Raises:
        AlignmentError: an anchor is missing and neither an offset nor an estimate is available.
    """
    if request.offset_us is not None:
        return Alignment("offset", us_to_ns(request.offset_us), reason="--offset-us")
    if request.mode is AlignMode.OFFSET:
        raise AlignmentError("--align offset needs --offset-us N (µs added to every Proton time)")
    viz_base, proton_base = evidence.viz_base_ns, evidence.proton_base_ns
    if viz_base is not None and proton_base is not None:
        anchored = Alignment("anchors", proton_base - viz_base, reason="baseTimeNanoseconds")
        if not request.check_anchors:
            return anchored
        return check_anchor(anchored, evidence.rank, _estimate(evidence))
    if request.mode is AlignMode.ANCHORS:
        raise missing_anchor_error(evidence.viz_path, proton_base, evidence.proton_path)
    return estimate(evidence.rank, evidence.viz_path, proton_base, evidence.proton_path,
                    _estimate(evidence))


def _estimate(evidence: RankEvidence):
    """The estimator's result (``tokentrace.align.estimate`` is imported only when it runs)."""
    from tokentrace.align.estimate import (
        KernelEvidence,
        estimate_from_events,
        estimate_offset,
        prepare_kernels,
        replay_calls_for,
    )

    if evidence.host_calls is None:
        return estimate_offset(evidence.viz_path, evidence.kernels)
    kernels = evidence.kernels
    prepared = kernels if isinstance(kernels, KernelEvidence) else prepare_kernels(kernels)
    return estimate_from_events(evidence.host_calls, prepared,
                                replays=replay_calls_for(evidence.viz_path, prepared))


def missing_anchor_error(viz_path: Path, proton_base_ns: int | None, proton_path: Path) -> AlignmentError:
    """The pointed error: which file lacks its anchor, which producer writes none, what to do."""
    if proton_base_ns is None:
        writer = ("the torch profiler before torch 2.4" if _is_torch_trace(proton_path)
                  else "Proton from triton <= 3.8")
        where = f"{proton_path} has no clock anchor (baseTimeNanoseconds); {writer} writes none"
    else:
        where = (
            f"{viz_path} has no clock anchor (viztracer_metadata.baseTimeNanoseconds); VizTracer "
            "< 1.0 and the viztracer command line's raw dumps write none (save with the Python API)"
        )
    return AlignmentError(
        f"{where}; pass --offset-us N (µs added to every GPU time), use --align auto to "
        "estimate it from the traces, or record with triton >= 3.9 / torch >= 2.4"
    )


def _is_torch_trace(path: Path) -> bool:
    """A torch-profiler trace, by the engines' file names (``*.trace.json[.gz]``)."""
    return path.name.endswith((".trace.json", ".trace.json.gz"))


# The shortest GPU gap the bundled queries class by default (their min_gap_us): an estimated
# offset less certain than this cannot tell host-late gaps of that length from GPU-side ones.
CLASSED_GAP_NS = 100_000


def _evidence(found) -> str:
    """``lower: <call>; upper: <call>`` of an estimate (what bounded its interval)."""
    if not getattr(found, "lo_by", "") and not getattr(found, "hi_by", ""):
        return ""
    return f"lower: {found.lo_by or 'none'}; upper: {found.hi_by or 'none'}"


def _us(value_ns: int | None) -> str:
    return "?" if value_ns is None else f"{value_ns / 1e3:.3f}"


def estimate(rank: str, viz_path: Path, proton_base_ns: int | None, proton_path: Path, found) -> Alignment:
    """The estimated alignment, with a warning giving the interval and the evidence.

    Raises:
        AlignmentError: the estimator refused (too little or inconsistent evidence).
    """
    if found.offset_ns is None:
        raise AlignmentError(
            f"{missing_anchor_error(viz_path, proton_base_ns, proton_path)} "
            f"(estimating it from the traces failed: {found.reason})"
        )
    evidence = _evidence(found)
    width = found.hi_ns - found.lo_ns
    warnings.warn(
        f"{rank}: {proton_path}: no clock anchor; offset estimated from the traces: "
        f"{_us(found.offset_ns)} µs, true offset in [{_us(found.lo_ns)}, {_us(found.hi_ns)}] µs "
        f"({width / 1e3:.1f} µs wide; {found.n_matches} matches, {found.method}"
        f"{'; ' + evidence if evidence else ''}); check it or pass --offset-us",
        TokentraceWarning,
        stacklevel=2,
    )
    if width > CLASSED_GAP_NS:
        warnings.warn(
            f"{rank}: the estimated offset is known to {width / 1e3:.1f} µs only, more than the "
            f"{CLASSED_GAP_NS / 1e3:g} µs shortest gap the queries class by default: gaps shorter "
            "than that width cannot be classed host-late or GPU-side with confidence (raise "
            "min_gap_us to it, or pass --offset-us)",
            TokentraceWarning,
            stacklevel=2,
        )
    return Alignment("estimated", found.offset_ns, found.lo_ns, found.hi_ns, None, found.reason, evidence)


def check_anchor(anchored: Alignment, rank: str, found) -> Alignment:
    """The anchored alignment with the estimator's interval and whether the anchors lie in it.

    A refused estimate leaves the interval unknown (``anchor_consistent`` None); an anchored
    offset outside the interval raises a :class:`TokentraceWarning` (broken clocks or anchors).
    """
    from tokentrace.align.estimate import check_anchor as inside

    consistent = inside(found, anchored.offset_ns)
    if consistent is False:
        warnings.warn(
            f"{rank}: clocks of the two files disagree: the anchored offset "
            f"{_us(anchored.offset_ns)} µs lies outside [{_us(found.lo_ns)}, {_us(found.hi_ns)}] µs, "
            f"the interval the traces prove ({found.n_matches} matches); the anchors or clocks are "
            "broken: check them, or pass --offset-us",
            TokentraceWarning,
            stacklevel=2,
        )
    return dataclasses.replace(anchored, lo_ns=found.lo_ns, hi_ns=found.hi_ns, anchor_consistent=consistent,
                               evidence=_evidence(found))
