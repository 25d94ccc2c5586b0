"""``tokentrace merge``: every rank's VizTracer + Proton pair on one Perfetto timeline.

Library entry point :func:`merge`; the per-rank writer lives in :mod:`tokentrace.merge_rank`,
the all-ranks writer in :mod:`tokentrace.merge_combine`, the contract in docs/merged-format.md.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from tokentrace.clock import AlignMode
from tokentrace.discover import RankFiles, discover, pair_explicit
from tokentrace.errors import InputError, TokentraceWarning
from tokentrace.merge_rank import RankResult, merge_rank

__all__ = ["AlignMode", "MergeResult", "RankResult", "merge", "find_ranks", "output_paths"]


@dataclasses.dataclass
class MergeResult:
    """What :func:`merge` wrote.

    Attributes:
        ranks: one entry per rank, sorted by rank tag.
        outputs: every file written (per-rank files, then the combined file).
        combined: the combined file, ``None`` without ``combine``.
        warnings: every warning raised (also emitted as :class:`TokentraceWarning`).
    """

    ranks: list[RankResult]
    outputs: list[Path]
    combined: Path | None = None
    warnings: list[str] = dataclasses.field(default_factory=list)


def find_ranks(inputs: Sequence[Path], profile_id: str | None = None) -> list[RankFiles]:
    """One folder -> discovery by file names; files -> explicit pairing."""
    if len(inputs) == 1 and Path(inputs[0]).is_dir():
        return discover(Path(inputs[0]), profile_id)
    if not inputs:
        raise InputError("nothing to merge: pass a profile folder or VIZ.json PROTON.chrome_trace")
    return pair_explicit([Path(p) for p in inputs])


def output_paths(
    ranks: list[RankFiles], output: Path | None, combine: bool, compress: bool
) -> tuple[dict[RankFiles, Path], Path | None]:
    """Per-rank and combined output paths.

    ``output`` ending in ``.json``/``.json.gz`` names the file itself (the combined file with
    ``combine``, else the single rank's file); otherwise it is a folder. Default: the folder of
    the first VizTracer input.
    """
    suffix = ".merged.json.gz" if compress else ".merged.json"
    is_file = output is not None and (output.name.endswith(".json") or output.name.endswith(".json.gz"))
    folder = (output.parent if is_file else output) if output is not None else ranks[0].viztracer.parent
    per_rank = {r: folder / f"{r.profile_id}-{r.tag}{suffix}" for r in ranks}
    combined = folder / f"{ranks[0].profile_id}{suffix}" if combine else None
    if is_file and combine:
        combined = output
    elif is_file and len(ranks) == 1:
        per_rank = {ranks[0]: output}
    elif is_file:
        raise InputError(f"{output}: {len(ranks)} ranks need an output folder (or --combine)")
    return per_rank, combined


def merge(
    inputs: Sequence[Path], output: Path | None = None, *, combine: bool = False,
    compress: bool = False, align: AlignMode = AlignMode.AUTO, offset_us: float | None = None,
    profile_id: str | None = None, jobs: int = 1,
    progress: Callable[[str], None] | None = None, check_anchors: bool = True,
) -> MergeResult:
    """Merges every rank found in ``inputs`` (one folder, or explicit files).

    Args:
        inputs: a profile folder, or a VizTracer report and its Proton file(s).
        output: output folder or file name (see :func:`output_paths`).
        combine: also write one file with every rank on a common time axis.
        compress: gzip the output (also implied by a ``.gz`` output name).
        align: ``auto``, ``anchors`` or ``offset``.
        offset_us: the user's offset in µs, added to every Proton time (all ranks).
        profile_id: the profile id to take from a folder holding several.
        jobs: ranks merged in parallel (processes).
        progress: called with the rank tag when a rank is done.
        check_anchors: with anchors, also compute the estimator's interval (0.1-0.3 s per rank)
            and warn when the anchored offset lies outside it.

    Raises:
        InputError, DiscoveryError, AlignmentError: see their messages.
    """
    ranks = find_ranks(inputs, profile_id)
    compress = compress or (output is not None and output.name.endswith(".gz"))
    per_rank, combined = output_paths(ranks, output, combine, compress)
    options = (align, offset_us, compress, check_anchors)
    results = _merge_ranks(ranks, per_rank, options, jobs, progress)
    outputs = [per_rank[r] for r in ranks]
    if combined is not None:
        from tokentrace.merge_combine import merge_combined

        merge_combined(ranks, results, combined, compress)
        outputs.append(combined)
    messages = [m for r in results for m in r.warnings]
    for message in dict.fromkeys(messages):
        warnings.warn(message, TokentraceWarning, stacklevel=2)
    return MergeResult(results, outputs, combined, messages)


def _merge_ranks(ranks, per_rank, options, jobs, progress) -> list[RankResult]:
    """Merges each rank (in worker processes with ``jobs`` > 1; the anchor check runs there too)."""
    def call(pool_submit):
        return [pool_submit(merge_rank, r, per_rank[r], *options) for r in ranks]

    if jobs <= 1 or len(ranks) == 1:
        results = []
        for rank in ranks:
            results.append(merge_rank(rank, per_rank[rank], *options))
            if progress:
                progress(str(rank.tag))
        return results
    import concurrent.futures  # lazily: a one-rank merge needs no process pool (6 ms import)

    with concurrent.futures.ProcessPoolExecutor(max_workers=min(jobs, len(ranks))) as pool:
        futures = call(pool.submit)
        for future in concurrent.futures.as_completed(futures):
            future.result()
            if progress:
                progress("")
        return [f.result() for f in futures]
