"""``tokentrace merge``: every rank's VizTracer + Proton pair on one Perfetto timeline.

Library entry point :func:`merge`; the per-rank writer lives in :mod:`tokentrace.merge.rank`,
the all-ranks writer in :mod:`tokentrace.merge.combine`, the contract in docs/merged-format.md.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from tokentrace.errors import InputError, TokentraceWarning
from tokentrace.merge.rank import RankResult, merge_rank
from tokentrace.options import MergeOptions
from tokentrace.sources.discover import RankFiles, discover, pair_explicit

__all__ = ["MergeResult", "RankResult", "find_ranks", "merge", "output_paths"]


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
    folder = (output.parent if is_file else output) if output is not None else ranks[0].first_input.parent
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
    inputs: Sequence[Path], output: Path | None = None, options: MergeOptions | None = None, *,
    progress: Callable[[str], None] | None = None,
) -> MergeResult:
    """Merges every rank found in ``inputs`` (one folder, or explicit files).

    Args:
        inputs: a profile folder, or a VizTracer report and its Proton file(s).
        output: output folder or file name (see :func:`output_paths`).
        options: alignment, compression, ``combine``, profile id, parallel jobs
            (:class:`~tokentrace.options.MergeOptions`; default: its defaults).
        progress: called with the rank tag when a rank is done.

    Raises:
        InputError, DiscoveryError, AlignmentError: see their messages.
    """
    options = options or MergeOptions()
    ranks = find_ranks(inputs, options.profile_id)
    if output is not None and Path(output).name.endswith(".gz") and not options.compress:
        options = dataclasses.replace(options, compress=True)
    per_rank, combined = output_paths(ranks, output, options.combine, options.compress)
    results = _merge_ranks(ranks, per_rank, options, progress)
    outputs = [per_rank[r] for r in ranks]
    if combined is not None:
        from tokentrace.merge.combine import merge_combined

        merge_combined(ranks, results, combined, options.compress)
        outputs.append(combined)
    messages = [m for r in results for m in r.warnings]
    for message in dict.fromkeys(messages):
        warnings.warn(message, TokentraceWarning, stacklevel=2)
    return MergeResult(results, outputs, combined, messages)


def _merge_ranks(ranks, per_rank, options: MergeOptions, progress) -> list[RankResult]:
    """Merges each rank (in worker processes with ``jobs`` > 1; the anchor check runs there too)."""
    if options.jobs <= 1 or len(ranks) == 1:
        results = []
        for rank in ranks:
            results.append(merge_rank(rank, per_rank[rank], options))
            if progress:
                progress(str(rank.tag))
        return results
    import concurrent.futures  # lazily: a one-rank merge needs no process pool (6 ms import)

    with concurrent.futures.ProcessPoolExecutor(max_workers=min(options.jobs, len(ranks))) as pool:
        futures = [pool.submit(merge_rank, r, per_rank[r], options) for r in ranks]
        for future in concurrent.futures.as_completed(futures):
            future.result()
            if progress:
                progress("")
        return [f.result() for f in futures]
