"""The per-rank merged traces of one run and where each goes on the common time axis."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tokentrace.merge.combine import time_origin
from tokentrace.merge.rank_events import RankResult


@dataclasses.dataclass(frozen=True)
class RankTrace:
    """One rank's merged trace.

    Attributes:
        rank: the rank tag; None for one trace file queried as it is (a merged trace of one
            rank or all, or a raw trace): its rows keep the ranks they name.
        path: its per-rank merged file, or that trace file.
        shift_ns: added to its times to put them on the run's common axis: the axis of the
            combined file ``tokentrace merge --combine`` writes (the VizTracer axis of the rank
            with the earliest anchor: 0 for every rank of one host), so per-rank rows line up,
            and equal the combined file's.
    """

    rank: str | None
    path: Path
    shift_ns: int = 0


def rank_traces(results: list[RankResult]) -> list[RankTrace]:
    """The ranks of a merge (:attr:`MergeResult.ranks`, each with its per-rank ``output``), in
    rank order, with their shifts (:func:`tokentrace.merge.combine.time_origin`)."""
    _, shifts = time_origin(results)
    missing = [r.tag for r in results if r.output is None]
    if missing:
        raise ValueError(f"ranks without a per-rank merged file: {', '.join(missing)}")
    return [RankTrace(r.tag, Path(r.output), shift) for r, shift in zip(results, shifts)]


def cached_ranks(merged) -> list[RankTrace]:
    """The ranks of a cached merge (:class:`tokentrace.merge.cache.MergedTrace`)."""
    return [RankTrace(tag, Path(path), shift) for tag, path, shift in merged.ranks]
