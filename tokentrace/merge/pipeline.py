"""``tokentrace merge``: every rank's VizTracer + Proton pair on one Perfetto timeline.

Library entry point :func:`merge`; the per-rank writer lives in :mod:`tokentrace.merge.rank`,
the all-ranks writer in :mod:`tokentrace.merge.combine`, the contract in docs/merged-format.md.
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from tokentrace.errors import InputError, TokentraceWarning
from tokentrace.merge.rank import merge_rank
from tokentrace.merge.rank_events import RankResult
from tokentrace.options import MergeOptions
from tokentrace.runtime.files import make_folder, refuse_inputs
from tokentrace.runtime.journal import journal
from tokentrace.sources.discover import RankFiles
from tokentrace.sources.profile import Profile, find_profile
from tokentrace.version import tool_version

__all__ = ["MergeResult", "RankResult", "check_options", "merge", "output_paths"]

#: What a run of ranks in worker processes says when a worker died.
MERGE_WORKER_DIED = ("a merge worker process died (killed, or out of memory?); run again, with -j 1 "
                     "to merge one rank at a time")

# Largest --offset-us: Perfetto keeps ns in int64 (9.2e18 ns); 1e13 µs is about 116 days.
MAX_OFFSET_US = 1e13


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
    if output is not None and not is_file and output.exists() and not output.is_dir():
        raise InputError(f"{output}: is a file; -o takes an output folder, or a file name ending "
                         "in .json or .json.gz")
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
    inputs: Sequence[Path] | Profile, output: Path | None = None, options: MergeOptions | None = None, *,
    progress: Callable[[str], None] | None = None,
) -> MergeResult:
    """Merges every rank found in ``inputs`` (one folder, or explicit files).

    Args:
        inputs: a profile folder, or a VizTracer report and its Proton file(s); or the
            :class:`~tokentrace.sources.profile.Profile` found in them already.
        output: output folder or file name (see :func:`output_paths`).
        options: alignment, compression, ``combine``, profile id, parallel jobs
            (:class:`~tokentrace.options.MergeOptions`; default: its defaults).
        progress: called with the rank tag when a rank is done.

    Raises:
        InputError, DiscoveryError, AlignmentError: see their messages.
    """
    options = options or MergeOptions()
    check_options(options)
    profile = inputs if isinstance(inputs, Profile) else find_profile(inputs, options.profile_id)
    ranks = list(profile.ranks)
    if output is not None and Path(output).name.endswith(".gz") and not options.compress:
        options = dataclasses.replace(options, compress=True)
    per_rank, combined = output_paths(ranks, output, options.combine, options.compress)
    outputs = [per_rank[r] for r in ranks] + ([combined] if combined is not None else [])
    refuse_inputs(outputs, list(profile.inputs))
    with journal() as written:  # all or nothing: a failed rank takes the others' files with it
        for path in outputs:
            make_folder(path.parent)
            written.track(path)  # also for the files that worker processes write
        parts = _part_requests(ranks, combined, options)
        for part in parts.values():
            written.track(part.path)  # removed again on failure, like any file written here
        try:
            results = _merge_ranks(ranks, per_rank, options, progress, parts)
            if combined is not None:
                from tokentrace.merge.combine import merge_combined

                merge_combined(ranks, results, combined, options.compress, options.raw)
        finally:
            for part in parts.values():
                part.path.unlink(missing_ok=True)
        for result in results:
            result.combined_part = None  # its file is gone
    return MergeResult(results, outputs, combined, rank_warnings(results))


def rank_warnings(results: Sequence[RankResult]) -> list[str]:
    """The ranks' warnings, in rank order; each emitted once as a
    :class:`~tokentrace.errors.TokentraceWarning`."""
    messages = [m for r in results for m in r.warnings]
    for message in dict.fromkeys(messages):
        warnings.warn(message, TokentraceWarning, stacklevel=3)
    return messages


def _part_requests(ranks: list[RankFiles], combined: Path | None, options: MergeOptions) -> dict:
    """Where each rank's worker writes its part of the combined file (:mod:`.part`): a hidden
    file beside it, removed once the combined file is written; none for a gzip output (the
    per-rank files are compressed too, so no host bytes can be copied from them by offset: the
    ranks are rewritten)."""
    if combined is None or options.compress:
        return {}
    from tokentrace.merge.part import PartRequest

    # a short name of its own (the combined file's name may be near the file system's limit)
    return {rank: PartRequest(combined.with_name(f".tt-{os.getpid()}-{index}.part"), index)
            for index, rank in enumerate(ranks)}


def _merge_ranks(ranks, per_rank, options: MergeOptions, progress, parts: dict) -> list[RankResult]:
    """Merges each rank (in worker processes with ``jobs`` > 1; the anchor check runs there
    too)."""
    from tokentrace.runtime.each import run_each

    def rank_done(index: int) -> None:
        if options.combine:
            # the combined file's block needs it; its first use searches the installed package
            # metadata (cached after): done as the first rank ends, while the others still run
            tool_version()
        if progress:
            progress(str(ranks[index].tag))

    # an error in a rank, or a signal here: no worker outlives the merge
    return run_each([(merge_rank, r, per_rank[r], options, parts.get(r)) for r in ranks], options.jobs,
                    MERGE_WORKER_DIED, rank_done)


def check_options(options: MergeOptions) -> None:
    """Refuses option values no merge can use, before any work.

    Raises:
        InputError: a non-finite or absurd ``offset_us``, or ``jobs`` below 1.
    """
    offset = options.offset_us
    if offset is not None and not (isinstance(offset, (int, float)) and math.isfinite(offset)
                                   and abs(offset) <= MAX_OFFSET_US):
        raise InputError(f"--offset-us {offset}: give a finite number of µs (at most "
                         f"{MAX_OFFSET_US:.0e} either way: about 116 days)")
    if not isinstance(options.jobs, int) or options.jobs < 1:
        raise InputError(f"--jobs {options.jobs}: give a whole number of at least 1")
