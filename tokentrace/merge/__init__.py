"""Merged-trace writers: every rank's host + GPU pair on one Perfetto timeline.

:func:`merge` is the entry point (:mod:`.pipeline`); :mod:`.rank` writes one rank's file,
:mod:`.combine` all ranks in one, :mod:`.cache` keeps a profile folder's merge for reuse.
The file contract is docs/merged-format.md.
"""

from tokentrace.merge.pipeline import MergeResult, merge, output_paths
from tokentrace.merge.rank_events import RankResult
from tokentrace.sources.profile import Profile, find_profile

__all__ = ["MergeResult", "MergedTrace", "Profile", "RankResult", "find_profile", "merge", "merged_folder",
           "output_paths"]


def __getattr__(name: str):
    # Lazy: the cache (and its imports: hashlib, json, shutil) serves analyze and tokentrace.open,
    # not merge.
    if name in ("MergedTrace", "merged_folder"):
        from tokentrace.merge import cache
        return getattr(cache, name)
    raise AttributeError(f"module 'tokentrace.merge' has no attribute {name!r}")
