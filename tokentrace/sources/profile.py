"""A profile, found once: its ranks with their identities and input files, and each input's
size and modification time as found.

Every command finds its profile here (:func:`find_profile`, the one caller of discovery) and
passes the :class:`Profile` down: the merge, its cache key, the queries that ride on the merge
and the progress lines read it, and nothing below lists the folder again. A profile is a value:
what a command found is what it merges, even if the folder changes meanwhile (the cache key
then reads the contents it names, :func:`tokentrace.merge.cache.cache_key`).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

from tokentrace.errors import InputError, TokentraceWarning
from tokentrace.sources import discover as _discover
from tokentrace.sources.discover import RankFiles


@dataclasses.dataclass(frozen=True)
class Profile:
    """One profile's ranks, as found.

    Attributes:
        source: the profile folder, or the first of the files given.
        ranks: every rank's files, sorted by rank, each with its identity where read.
        stamps: per input (:attr:`inputs`, same order), its size and modification time (ns) as
            found; ``(-1, -1)`` for a file that could not be read (its reader says why).
        warnings: what discovery had to say (emitted once, by :func:`find_profile`).
        left_out: trace files seen and not analysed (CPU-only traces).
        is_folder: True for a profile folder, False for files given one by one.
    """

    source: Path
    ranks: tuple[RankFiles, ...]
    stamps: tuple[tuple[int, int], ...]
    warnings: tuple[str, ...] = ()
    left_out: tuple[Path, ...] = ()
    is_folder: bool = True
    _derived: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def derived(self, name: str, compute):
        """A value derived from the profile's files once (their content digests, read for the
        merge's cache key): ``compute()`` the first time ``name`` is asked, then the same value
        (the profile is what was found: its files are read as found, once)."""
        if name not in self._derived:
            self._derived[name] = compute()
        return self._derived[name]

    @property
    def inputs(self) -> tuple[Path, ...]:
        """Every input file, rank by rank: its VizTracer report (when there is one), then its
        GPU trace file(s)."""
        return tuple(p for r in self.ranks for p in (r.viztracer, *r.gpu) if p is not None)

    @property
    def input_bytes(self) -> int:
        """The inputs' sizes on disk, added up."""
        return sum(max(size, 0) for size, _ in self.stamps)


def find_profile(inputs: str | os.PathLike | Sequence[str | os.PathLike],
                 profile_id: str | None = None) -> Profile:
    """The profile in ``inputs``: one folder (found by its files' names, else by content) or
    files named one by one (paired by name or content); discovery's warnings are emitted as
    :class:`~tokentrace.errors.TokentraceWarning` s.

    Args:
        inputs: a profile folder, or its files (a VizTracer report and its GPU trace, ...).
        profile_id: keep only this profile id (a folder holding several).

    Raises:
        InputError: nothing given, or a path that does not exist.
        DiscoveryError: no rank, several profile ids, unpaired files, two files for one rank.
    """
    paths = [Path(inputs)] if isinstance(inputs, (str, os.PathLike)) else [Path(p) for p in inputs]
    if not paths:
        raise InputError("nothing to merge: pass a profile folder or VIZ.json PROTON.chrome_trace")
    if len(paths) == 1 and paths[0].is_dir():
        found = _discover.find_folder(paths[0], profile_id)
        profile = Profile(paths[0], found.ranks, _stamps(found.ranks), found.warnings, found.left_out)
    else:
        ranks = tuple(_discover.pair_explicit(paths))
        profile = Profile(paths[0], ranks, _stamps(ranks), is_folder=False)
    for message in profile.warnings:
        warnings.warn(message, TokentraceWarning, stacklevel=2)
    return profile


def _stamps(ranks: Sequence[RankFiles]) -> tuple[tuple[int, int], ...]:
    stamps = []
    for path in (p for r in ranks for p in (r.viztracer, *r.gpu) if p is not None):
        try:
            stat = path.stat()
        except OSError:
            stamps.append((-1, -1))
        else:
            stamps.append((stat.st_size, stat.st_mtime_ns))
    return tuple(stamps)
