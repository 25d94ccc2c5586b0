"""Clock offsets between a rank's VizTracer (host) and Proton (GPU) traces.

``offset_ns`` is added to a Proton time (ns from the Proton zero) to place it on the VizTracer
axis (CLOCK_MONOTONIC ns). With both anchors it is exact:
``offset_ns = proton.baseTimeNanoseconds - viz.baseTimeNanoseconds``.
"""

from __future__ import annotations

import dataclasses
import enum
import warnings
from collections.abc import Sequence
from pathlib import Path

from tokentrace.errors import AlignmentError, TokentraceWarning
from tokentrace.units import us_to_ns


class AlignMode(str, enum.Enum):
    """How ``tokentrace merge`` aligns clocks (``--align``)."""

    AUTO = "auto"  # anchors when both files have them, else the estimator
    ANCHORS = "anchors"  # anchors only; error without them
    OFFSET = "offset"  # the user's --offset-us


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
    kernels: Sequence[tuple[str, int, int]],
    offset_us: float | None = None,
) -> Alignment:
    """Chooses the offset of one rank.

    Args:
        mode: ``auto``, ``anchors`` or ``offset``.
        viz_path: the VizTracer report (named in errors; read by the estimator).
        viz_base_ns: its ``baseTimeNanoseconds`` or ``None``.
        proton_path: the (first) Proton file, named in errors.
        proton_base_ns: its ``baseTimeNanoseconds`` or ``None``.
        kernels: ``(name, start_ns, end_ns)`` in Proton time, sorted by start (for the estimator).
        offset_us: the user's ``--offset-us``; given, it wins in ``auto`` too.

    Raises:
        AlignmentError: an anchor is missing and neither an offset nor an estimate is available.
    """
    if offset_us is not None:
        return Alignment("offset", us_to_ns(offset_us), reason="--offset-us")
    if mode is AlignMode.OFFSET:
        raise AlignmentError("--align offset needs --offset-us N (µs added to every Proton time)")
    if viz_base_ns is not None and proton_base_ns is not None:
        anchored = Alignment("anchors", proton_base_ns - viz_base_ns, reason="baseTimeNanoseconds")
        return check_anchor(anchored, viz_path, kernels)
    if mode is AlignMode.ANCHORS:
        raise missing_anchor_error(viz_path, proton_base_ns, proton_path)
    return estimate(viz_path, proton_base_ns, proton_path, kernels)


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
        f"{where}; pass --offset-us N (µs added to every Proton time) or record with triton >= 3.9"
    )


def estimate(
    viz_path: Path, proton_base_ns: int | None, proton_path: Path, kernels: Sequence[tuple[str, int, int]]
) -> Alignment:
    """The single call site of the offset estimator (tokentrace.estimate, imported lazily).

    Raises:
        AlignmentError: the estimator is not available, or it could not estimate.
    """
    try:
        from tokentrace.estimate import estimate_offset  # type: ignore[attr-defined]
    except ImportError:
        raise missing_anchor_error(viz_path, proton_base_ns, proton_path) from None
    found = estimate_offset(viz_path, kernels)
    if found.offset_ns is None:
        raise AlignmentError(
            f"{missing_anchor_error(viz_path, proton_base_ns, proton_path)} "
            f"(estimating it from the traces failed: {found.reason})"
        )
    warnings.warn(
        f"{proton_path}: no clock anchor; offset estimated from the traces "
        f"({found.offset_ns / 1e3:.3f} µs, {found.n_matches} matches, {found.method}); "
        "check it or pass --offset-us",
        TokentraceWarning,
        stacklevel=2,
    )
    return Alignment("estimated", found.offset_ns, found.lo_ns, found.hi_ns, None, found.reason)


def check_anchor(
    anchored: Alignment, viz_path: Path, kernels: Sequence[tuple[str, int, int]]
) -> Alignment:
    """HOOK (to be wired to the estimator): bound the true offset from the traces and set
    ``lo_ns``/``hi_ns``/``anchor_consistent``. Today it returns the anchors unchecked."""
    del viz_path, kernels  # used once the estimator's interval is wired in
    return anchored
