"""Many ranks: each rank's merged trace loaded and queried on its own (the map, in parallel
processes or on a Dask cluster), the rows put on one time axis and concatenated, cross-rank
queries reduced over all ranks' map rows (:mod:`tokentrace.catalog.reduce`).

No combined trace is needed: memory is one rank's trace per worker, however many ranks.
"""

from tokentrace.fleet.batch import QueryRequest, RankStep
from tokentrace.fleet.ranks import RankTrace, cached_ranks, rank_traces
from tokentrace.fleet.runner import RankSet

__all__ = ["QueryRequest", "RankSet", "RankStep", "RankTrace", "cached_ranks", "rank_traces"]
