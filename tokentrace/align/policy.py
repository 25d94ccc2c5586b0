"""Clock offsets between a rank's VizTracer (host) and Proton (GPU) traces.

``offset_ns`` is added to a Proton time (ns from the Proton zero) to place it on the VizTracer
axis (CLOCK_MONOTONIC ns). With both anchors it is exact:
``offset_ns = proton.baseTimeNanoseconds - viz.baseTimeNanoseconds``.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from pathlib import Path

from tokentrace.errors import AlignmentError, TokentraceWarning
from tokentrace.options import AlignMode
from tokentrace.units import us_to_ns


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
    """

    method: str
    offset_ns: int
    lo_ns: int | None = None
    hi_ns: int | None = None
    anchor_consistent: bool | None = None
    reason: str = ""


def align(
    mode: AlignMode,
    viz_path: Path,
    viz_base_ns: int | None,
    proton_path: Path,
    proton_base_ns: int | None,
    kernels: Sequence[tuple],
    offset_us: float | None = None,
    *,
    rank: str = "",
    check_anchors: bool = True,
    evidence=None,
) -> Alignment:
    """Chooses the offset of one rank.

    Args:
        mode: ``auto``, ``anchors`` or ``offset``.
        viz_path: the VizTracer report (named in errors; read by the estimator).
        viz_base_ns: its ``baseTimeNanoseconds`` or ``None``.
        proton_path: the (first) Proton file, named in errors.
        proton_base_ns: its ``baseTimeNanoseconds`` or ``None``.
        kernels: ``(name, start_ns, end_ns, stream)`` in Proton time (for the estimator).
        offset_us: the user's ``--offset-us``; given, it wins in ``auto`` too.
        rank: the rank tag, named in warnings.
        check_anchors: with anchors, also compute the estimator's interval and check them.
        evidence: an :class:`~tokentrace.align.estimate.OffsetEstimate` already computed (the merge
            runs the estimator while the host events are copied), else computed here.

    Raises:
        AlignmentError: an anchor is missing and neither an offset nor an estimate is available.
    """
    if offset_us is not None:
        return Alignment("offset", us_to_ns(offset_us), reason="--offset-us")
    if mode is AlignMode.OFFSET:
        raise AlignmentError("--align offset needs --offset-us N (µs added to every Proton time)")
    if viz_base_ns is not None and proton_base_ns is not None:
        anchored = Alignment("anchors", proton_base_ns - viz_base_ns, reason="baseTimeNanoseconds")
        if not check_anchors:
            return anchored
        return check_anchor(anchored, rank, evidence or run_estimator(viz_path, kernels))
    if mode is AlignMode.ANCHORS:
        raise missing_anchor_error(viz_path, proton_base_ns, proton_path)
    return estimate(rank, viz_path, proton_base_ns, proton_path, evidence or run_estimator(viz_path, kernels))


def needs_estimate(mode: AlignMode, offset_us: float | None, check_anchors: bool, proton_base_ns: int | None) -> bool:
    """Whether :func:`align` will use the estimator (so the merge can run it early)."""
    if offset_us is not None or mode is AlignMode.OFFSET:
        return False
    return check_anchors if proton_base_ns is not None else mode is AlignMode.AUTO


def may_need_estimate(mode: AlignMode, offset_us: float | None, check_anchors: bool) -> bool:
    """Whether :func:`align` may use the estimator, before the Proton anchor is known."""
    return needs_estimate(mode, offset_us, check_anchors, 0) or needs_estimate(mode, offset_us, check_anchors, None)


def estimate_from_events(host, kernels: Sequence[tuple]):
    """The estimator's result from host calls already extracted (by the merge's copy)."""
    from tokentrace.align.estimate import estimate_from_events as estimate_

    return estimate_(host, kernels)


def run_estimator(viz_path: Path, kernels: Sequence[tuple]):
    """The estimator's result for one rank (``tokentrace.align.estimate``, imported lazily)."""
    from tokentrace.align.estimate import estimate_offset

    return estimate_offset(viz_path, kernels)


def missing_anchor_error(viz_path: Path, proton_base_ns: int | None, proton_path: Path) -> AlignmentError:
    """The pointed error: which file lacks its anchor, which producer writes none, what to do."""
    if proton_base_ns is None:
        where = (
            f"{proton_path} has no clock anchor (baseTimeNanoseconds); Proton from triton <= 3.8 "
            "writes none"
        )
    else:
        where = (
            f"{viz_path} has no clock anchor (viztracer_metadata.baseTimeNanoseconds); VizTracer "
            "< 1.0 and the viztracer command line's raw dumps write none (save with the Python API)"
        )
    return AlignmentError(
        f"{where}; pass --offset-us N (µs added to every Proton time), use --align auto to "
        "estimate it from the traces, or record with triton >= 3.9"
    )


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
    warnings.warn(
        f"{rank}: {proton_path}: no clock anchor; offset estimated from the traces: "
        f"{_us(found.offset_ns)} µs, true offset in [{_us(found.lo_ns)}, {_us(found.hi_ns)}] µs "
        f"({found.n_matches} matches, {found.method}); check it or pass --offset-us",
        TokentraceWarning,
        stacklevel=2,
    )
    return Alignment("estimated", found.offset_ns, found.lo_ns, found.hi_ns, None, found.reason)


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
    return dataclasses.replace(anchored, lo_ns=found.lo_ns, hi_ns=found.hi_ns, anchor_consistent=consistent)
