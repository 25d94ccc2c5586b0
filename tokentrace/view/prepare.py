"""What ``tokentrace view TRACE|DIR`` serves: a merged, annotated trace.

Nothing is ever written into the profile folder, nor beside the trace given: what ``view``
writes goes to the user cache (:func:`tokentrace.runtime.files.cache_root`) only.

* An ``analyze`` output folder (``OUT/annotated/index.json``, :mod:`tokentrace.annotate.outputs`)
  holding one annotated trace: that trace, served as it is (several, one per rank: the user is
  told to pick one, or to view the profile folder for all ranks on one timeline).
* A profile folder is merged (all ranks in one file) through the merge cache in the user cache
  (``merged/``: :func:`tokentrace.merge.merged_folder` with ``beside_inputs=False``, never the
  folder's own ``.tokentrace-cache``) and that cached file is annotated in place (once: a file
  that already holds these annotations is not rewritten).
* A merged trace that carries annotations is served as it is; one without gets an annotated
  copy in the user cache (``annotated/`` in :func:`tokentrace.runtime.files.cache_root`, keyed by
  the file's path, size and mtime and the tool version), so the user's file is not touched.
* Any other trace (a raw VizTracer, Proton or torch-profiler file) is served as it is, with a
  warning: there is nothing to annotate without a merge.

Each file written is a cache entry, all or nothing under its own journal
(:func:`tokentrace.runtime.journal.journal` ``independent``): an error or a signal (under
:func:`tokentrace.runtime.command.command`) leaves no temp file and the cache as it was; a complete
entry stays even when the command fails later (or is stopped while serving).

Every file and folder written is no more readable than the inputs
(:func:`tokentrace.runtime.journal.private_like`): ``view`` of a 0600 trace leaves 0600 copies in 0700
folders in the user cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
import warnings
from pathlib import Path

from tokentrace.annotate import annotate_file, annotation_record
from tokentrace.errors import InputError, TokentraceWarning
from tokentrace.merge import merged_folder
from tokentrace.merge.cache import cache_remedy
from tokentrace.runtime.files import cache_root, remedy_for_writes
from tokentrace.runtime.journal import journal, private_like
from tokentrace.version import tool_version

#: Annotated copies kept in the user cache (the oldest go first).
KEEP_COPIES = 3


@dataclasses.dataclass(frozen=True)
class ServedTrace:
    """The trace to serve and how it was made.

    Attributes:
        path: the file served.
        source: what was asked for (a folder or a trace file).
        annotated: the file carries tokentrace's annotation tracks.
        merged: ``source`` is a profile folder, merged (or found in the merge cache).
    """

    path: Path
    source: Path
    annotated: bool
    merged: bool


def prepare_trace(target: str | os.PathLike, *, min_gap_us: float | None = None,
                  cache_dir: str | os.PathLike | None = None) -> ServedTrace:
    """Makes the trace ``tokentrace view`` serves for ``target`` (see the module's docstring).

    Args:
        target: a profile folder or a trace file.
        min_gap_us: shortest GPU gap with an annotation slice, µs (None: gap_causes' default).
        cache_dir: the merge cache of a folder (default: ``merged/`` in the user cache; never
            the profile folder).

    Raises:
        InputError, DiscoveryError, AlignmentError: from the merge; a missing target, a
            ``min_gap_us`` that is not a finite number >= 0 (both before any work).
        EngineError, QueryError: the trace processor failed while annotating.
    """
    source = check_target(target, min_gap_us)
    analyzed = analyze_output_trace(source)
    if analyzed is not None:
        return ServedTrace(analyzed, source, True, False)
    if source.is_dir():
        # the inputs' modes known before the cache folder is made (merge() learns them later)
        profile = _folder_profile(source)
        with private_like(list(profile.inputs) if profile is not None else []):
            merged = merged_folder(profile or source, cache_dir)
            root = merged.folder.parent
            # the entry's file, annotated in place: old or new
            with remedy_for_writes(cache_remedy(root, source, cache_dir is not None), root), \
                    journal(independent=True):
                annotate_file(merged.path, min_gap_us=min_gap_us)
        return ServedTrace(merged.path, source, True, True)
    try:
        record = annotation_record(source)
    except InputError:
        warnings.warn(f"{source}: not a merged trace, served without annotations (pass its profile "
                      "folder, or merge it first, to see tokentrace's GPU idle tracks)",
                      TokentraceWarning, stacklevel=2)
        return ServedTrace(source, source, False, False)
    if record is not None:
        return ServedTrace(source, source, True, False)
    copy = _copy_path(source, min_gap_us)
    if not copy.is_file() or annotation_record(copy) is None:
        # a complete copy or none (annotated/ made goes too)
        with remedy_for_writes(cache_remedy(copy.parent, source, False), copy.parent), \
                journal(independent=True):
            annotate_file(source, copy, min_gap_us=min_gap_us)
        _drop_old_copies(copy.parent, keep=copy)
    return ServedTrace(copy, source, True, False)


def check_target(target: str | os.PathLike, min_gap_us: float | None = None) -> Path:
    """What :func:`prepare_trace` checks before any work; returns the target as a path.

    Raises:
        InputError: the target is missing, or ``min_gap_us`` is not a finite number >= 0.
    """
    if min_gap_us is not None and not (math.isfinite(min_gap_us) and min_gap_us >= 0):
        raise InputError(f"min_gap_us {min_gap_us}: give a finite number of µs, 0 or more")
    source = Path(target)
    if not source.is_dir() and not source.is_file():
        raise InputError(f"{source}: no such file or folder; give a merged trace or a profile folder")
    analyze_output_trace(source)
    return source


def analyze_output_trace(folder: Path) -> Path | None:
    """The annotated trace of a ``tokentrace analyze`` output folder (its ``annotated/index.json``
    lists one); None for any other target.

    Raises:
        InputError: the folder lists several (one per rank: the message names them, and the
            profile folder that shows every rank on one timeline), or its index is unreadable.
    """
    from tokentrace.annotate.outputs import INDEX, read_index

    if not folder.is_dir():
        return None
    found = read_index(folder)
    if found is None:
        return None
    if len(found) == 1:
        return found[0]
    source = _indexed_source(folder / "annotated" / INDEX)
    every = f"; or the profile folder for all ranks on one timeline: tokentrace view {source}" if source else ""
    raise InputError(f"{folder}: holds {len(found)} annotated traces, one per rank; view one: "
                     f"tokentrace view {found[0]} (the others: "
                     f"{', '.join(p.name for p in found[1:])}){every}")


def _indexed_source(index: Path) -> str | None:
    import json

    try:
        source = json.loads(index.read_text(encoding="utf-8")).get("source")
    except (OSError, ValueError, AttributeError):
        return None
    return source if isinstance(source, str) and Path(source).is_dir() else None


def _folder_profile(folder: Path):
    """The profile in ``folder`` (:func:`~tokentrace.sources.profile.find_profile`); None when it
    holds none (the merge then says why)."""
    from tokentrace.errors import TokentraceError
    from tokentrace.merge import find_profile

    try:
        return find_profile(folder)
    except TokentraceError:
        return None


def _copy_path(source: Path, min_gap_us: float | None) -> Path:
    """Where the annotated copy of ``source`` goes: a name from its identity and the settings."""
    stat = source.stat()
    text = f"{source.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{tool_version()}|{min_gap_us}"
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    suffix = ".json.gz" if source.name.endswith(".gz") else ".json"
    stem = source.name.removesuffix(".gz").removesuffix(".json")
    return cache_root() / "annotated" / f"{stem}.{key}{suffix}"


# The names _copy_path gives: only those are ever removed from the folder (a cache folder the
# user named, $TOKENTRACE_CACHE_DIR, can hold their own files).
_COPY_NAME = re.compile(r".+\.[0-9a-f]{16}\.json(\.gz)?")


def _drop_old_copies(folder: Path, keep: Path) -> None:
    copies = sorted((p for p in folder.iterdir() if _COPY_NAME.fullmatch(p.name) and p != keep
                     and not p.is_symlink() and p.is_file()),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in copies[KEEP_COPIES - 1:]:
        try:
            old.unlink()
        except OSError:
            pass
