"""A profile folder merged once and reused: the cache behind :func:`tokentrace.open`,
``tokentrace analyze``, ``view`` and ``diff``.

The merged files go to ``merged/<key>/`` in the user cache folder
(:func:`~tokentrace.merge.cache_size.merged_root`: ``$TOKENTRACE_CACHE_DIR``, else the platform's
user cache, ``~/.cache/tokentrace``), one cache shared by every command: **nothing is ever written
into a profile folder** (profile folders are often shared or read-only). The key hashes every
input's path, size, modification time and a digest of its content (:func:`content_digest`), the
merge options and the tool version, so a changed input (even one copied over with its old size
and mtime: ``cp -p``, ``rsync -t``), option or tokentrace release merges again.
A ``manifest.json`` written last (atomically) marks a complete entry; an entry is written all
or nothing (a failed or interrupted merge leaves none). The user cache is bounded in bytes
(:func:`~tokentrace.merge.cache_size.cache_limit`: 2 GiB, or ``$TOKENTRACE_CACHE_SIZE``): after a
merge the least recently used entries go (:func:`~tokentrace.merge.cache_size.trim`). A cache
folder the caller names (``cache_dir=``) keeps its :data:`KEEP_ENTRIES` newest entries
(:func:`prune`).

Nothing is removed that tokentrace did not write: a cache folder can be one the user named
(``cache_dir=``, ``$TOKENTRACE_CACHE_DIR``), so pruning takes only entries that carry the mark a
merge writes first (:data:`ENTRY_MARK`, holding the entry's key, which is its name) and never
follows a symbolic link.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tokentrace.errors import InputError, TokentraceWarning
from tokentrace.merge.cache_size import SIZE_ENV, cache_limit, is_stale, merged_root, touch, trim
from tokentrace.options import MergeOptions
from tokentrace.runtime.files import CACHE_ENV, make_folder, remedy_for_writes, write_bytes
from tokentrace.runtime.journal import journal
from tokentrace.runtime.signals import signals_held
from tokentrace.sources.profile import Profile, find_profile

if TYPE_CHECKING:
    from tokentrace.merge.pipeline import MergeResult

#: The folder earlier releases wrote into a profile folder; never written (nor read) now.
CACHE_DIR_NAME = ".tokentrace-cache"
MANIFEST = "manifest.json"
# Written first into every entry a merge makes, holding its key: what pruning may remove.
ENTRY_MARK = ".tokentrace-entry"
_KEY = re.compile(r"[0-9a-f]{16}")
# Complete entries kept in a cache folder the caller names (cache_dir=; the newest: older ones
# are pruned after each merge). The user cache is bounded in bytes instead (cache_size.trim).
KEEP_ENTRIES = 4


@dataclasses.dataclass(frozen=True)
class MergedTrace:
    """A merged profile folder, ready to load.

    Attributes:
        path: the combined trace (every rank on one time axis); ``None`` for an entry of
            per-rank files only.
        folder: the cache entry holding it and the per-rank files.
        reused: True when the entry was already there (no merge ran).
        warnings: the merge's warnings (re-emitted on reuse, so nothing is lost).
        ranks: per rank, in rank order: its tag, its per-rank merged file and the shift (ns)
            that puts its times on the combined axis (:func:`~tokentrace.merge.combine.time_origin`).
        results: what the merge did per rank, in rank order (empty for a reused entry).
    """

    path: Path | None
    folder: Path
    reused: bool
    warnings: tuple[str, ...] = ()
    ranks: tuple[tuple[str, Path, int], ...] = ()
    results: tuple = dataclasses.field(default=(), repr=False)


# Changed whenever the merged bytes or the ranks' shifts change for the same inputs, so an entry
# an older merge wrote is not reused (2: ranks of one host unshifted on the common axis; 3:
# launch->kernel arrows as v2 flows).
CACHE_FORMAT = 3


def cache_key(profile: Profile, options: MergeOptions) -> str:
    """A short hash of the profile's inputs (path, size and mtime as found, and a digest of each
    one's content), the options that change the merged bytes, the tool version and
    :data:`CACHE_FORMAT`.

    Raises:
        InputError: an input cannot be read.
    """
    from tokentrace.version import tool_version

    # (the inputs' digests read once per profile: a plan and its run both ask for the key)
    digests = profile.derived("content digests", lambda: tuple(map(content_digest, profile.inputs)))
    stamp = [(str(p.resolve()), size, mtime, digest)
             for p, (size, mtime), digest in zip(profile.inputs, profile.stamps, digests)]
    text = json.dumps([stamp, options.cache_fields(), tool_version(), CACHE_FORMAT], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# What content_digest reads of a large file: both ends (a re-recorded trace differs in its first
# timestamps and its closing metadata) and evenly spaced samples between them.
DIGEST_END_BYTES = 4 << 20
DIGEST_SAMPLES = 16
DIGEST_SAMPLE_BYTES = 64 << 10


def content_digest(path: Path) -> str:
    """A digest of ``path``'s size and content: the whole file up to 2 x
    :data:`DIGEST_END_BYTES`, else its first and last :data:`DIGEST_END_BYTES` and
    :data:`DIGEST_SAMPLES` samples between. Its cost stays bounded (~9 MiB read per input)
    whatever the input's size: a full hash would read every byte of every input on every
    reuse, seconds for a rank of hundreds of MB, a good part of what the cache saves.

    Raises:
        InputError: the file cannot be read.
    """
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            digest.update(str(size).encode())
            if size <= 2 * DIGEST_END_BYTES:
                digest.update(handle.read())
                return digest.hexdigest()[:16]
            digest.update(handle.read(DIGEST_END_BYTES))
            step = (size - 2 * DIGEST_END_BYTES) // (DIGEST_SAMPLES + 1)
            for index in range(1, DIGEST_SAMPLES + 1):
                handle.seek(DIGEST_END_BYTES + index * step)
                digest.update(handle.read(DIGEST_SAMPLE_BYTES))
            handle.seek(size - DIGEST_END_BYTES)
            digest.update(handle.read(DIGEST_END_BYTES))
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return digest.hexdigest()[:16]


def merged_folder(folder: str | os.PathLike | Profile, cache_dir: str | os.PathLike | None = None,
                  options: MergeOptions | None = None, combined: bool = True,
                  *, beside_inputs: bool = False, progress=None) -> MergedTrace:
    """Merges a profile folder (per-rank files, and all ranks in one combined file) unless a
    fresh entry exists.

    Args:
        folder: the profile folder (``<profile_id>-<tag>.viztracer.json[.gz]`` + Proton files),
            or the :class:`~tokentrace.sources.profile.Profile` found in it already; read only,
            never written.
        cache_dir: where entries live; default ``merged/`` in the user cache folder (bounded
            in bytes, shared by every command).
        options: how to merge (``combine`` is set by ``combined``); part of the key.
        combined: also write the combined file; without it the entry holds per-rank files
            only (what the per-rank analyses need: :mod:`tokentrace.fleet`).
        beside_inputs: ignored (earlier releases wrote into the profile folder when True; no
            merge is written there now).
        progress: called with each rank's tag when a merge runs and that rank is done.

    Raises:
        InputError, DiscoveryError, AlignmentError: from discovery and merging; an
            unreadable ``$TOKENTRACE_CACHE_SIZE``.
    """
    del beside_inputs  # kept for callers of earlier releases: nothing goes beside the inputs
    from tokentrace.merge.pipeline import merge

    options = dataclasses.replace(options or MergeOptions(), combine=combined, compress=False)
    if cache_dir is None:
        cache_limit()  # a bad $TOKENTRACE_CACHE_SIZE refused before any work, discovery too
    profile = folder if isinstance(folder, Profile) else find_profile(folder, options.profile_id)
    return filled_entry(profile, cache_dir, options,
                        lambda entry: merge(profile, entry, options, progress=progress))


def filled_entry(profile: Profile, cache_dir: str | os.PathLike | None, options: MergeOptions,
                 fill: Callable[[Path], MergeResult]) -> MergedTrace:
    """The cache entry of ``profile`` merged with ``options`` (``combine`` and ``compress`` as
    given): the complete one reused when there is one, else a new one that ``fill(folder)``
    writes (the per-rank files, as :func:`~tokentrace.merge.merge` writes them into ``folder``,
    returning its result): all or nothing, the manifest written last, the cache trimmed after.

    Raises:
        InputError: an unreadable ``$TOKENTRACE_CACHE_SIZE``, a cache folder that cannot be
            written; what ``fill`` raises.
    """
    limit = cache_limit() if cache_dir is None else None  # a bad setting refused before work
    found = _cached(profile, cache_dir, options)
    if found is not None:
        touch(found.folder)
        for message in found.warnings:
            warnings.warn(message, TokentraceWarning, stacklevel=2)
        return found
    key = cache_key(profile, options)
    root = _first_writable([Path(cache_dir) if cache_dir is not None else merged_root()])
    with remedy_for_writes(cache_remedy(root, profile.source, cache_dir is not None), root):
        merged = _merge_into(profile, root / key, key, fill)
    if limit is None:
        prune(root, keep=KEEP_ENTRIES)
    else:
        trim(root, limit, keep=merged.folder)
    return merged


def cached_merge(profile: Profile, cache_dir: str | os.PathLike | None = None,
                 options: MergeOptions | None = None, combined: bool = True) -> MergedTrace | None:
    """The complete cache entry :func:`merged_folder` would reuse for ``profile`` (the same
    arguments), or None when it would merge; nothing is written or marked as used."""
    options = dataclasses.replace(options or MergeOptions(), combine=combined, compress=False)
    return _cached(profile, cache_dir, options)


def _cached(profile: Profile, cache_dir, options: MergeOptions) -> MergedTrace | None:
    key = cache_key(profile, options)
    return _read_manifest((Path(cache_dir) if cache_dir is not None else merged_root()) / key, key)


def cache_remedy(root: Path, source: Path, named: bool) -> str:
    """What to do when a write into the cache folder ``root`` fails for want of space or
    permission (:func:`~tokentrace.runtime.files.remedy_for_writes`): where else the merge can go."""
    if not named:
        return (f"point the cache elsewhere: set ${CACHE_ENV} to a folder on another disk "
                f"(or pass cache_dir= to tokentrace.open), or make room: tokentrace cache clear, "
                f"a smaller ${SIZE_ENV}")
    return "give another cache folder: cache_dir= of tokentrace.open"


def _read_manifest(entry: Path, key: str) -> MergedTrace | None:
    try:
        manifest = json.loads((entry / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    combined = entry / manifest["combined"] if manifest.get("combined") else None
    ranks = tuple((tag, entry / name, int(shift)) for tag, name, shift in manifest.get("ranks", ()))
    if (manifest.get("key") != key or (combined is not None and not combined.is_file())
            or not ranks or not all(path.is_file() for _, path, _ in ranks)):
        return None
    return MergedTrace(combined, entry, True, tuple(manifest.get("warnings", ())), ranks)


def _first_writable(roots: list[Path]) -> Path:
    for root in roots:
        try:
            make_folder(root)  # a failed command removes it again when it made it
            probe = root / f".probe-{os.getpid()}"
            with signals_held():  # a signal between the two would leave the probe behind
                probe.write_bytes(b"")
                probe.unlink()
            return root
        except (OSError, InputError):
            continue
    raise InputError(f"cannot write a merge cache in {' or '.join(map(str, roots))}; set "
                     f"${CACHE_ENV} (or pass cache_dir= to tokentrace.open) to a writable folder")


def _own_entries(root: Path) -> list[Path]:
    """The entries of ``root`` that a merge wrote: real folders (no link followed), named by a
    key, marked with that key (:data:`ENTRY_MARK`, or the manifest of an older release's
    entry). Anything else in ``root`` is the user's and is never touched."""
    if root.is_symlink() or not root.is_dir():
        return []
    found = []
    with os.scandir(root) as listing:
        for item in listing:
            if item.is_dir(follow_symlinks=False) and _KEY.fullmatch(item.name) and _is_marked(Path(item.path)):
                found.append(Path(item.path))
    return found


def _is_marked(entry: Path) -> bool:
    for name, read in ((ENTRY_MARK, lambda text: text.strip()),
                       (MANIFEST, lambda text: json.loads(text).get("key"))):
        path = entry / name
        try:
            if path.is_symlink() or not path.is_file():
                continue
            if read(path.read_text(encoding="utf-8")) == entry.name:
                return True
        except (OSError, ValueError, AttributeError):
            continue
    return False


def _merge_into(profile: Profile, entry: Path, key: str, fill: Callable[[Path], MergeResult]
                ) -> MergedTrace:
    """Fills ``entry`` (``fill``): all or nothing (an error or a signal removes the entry), the
    manifest written last; a complete entry stays even when the command fails later."""
    from tokentrace.merge.combine import time_origin

    with journal(independent=True):
        make_folder(entry)
        write_bytes(entry / ENTRY_MARK, key.encode())  # first: what prune may take
        result = fill(entry)
        _, shifts = time_origin(result.ranks)
        ranks = tuple((r.tag, Path(r.output), shift) for r, shift in zip(result.ranks, shifts))
        manifest = {"key": key, "source": str(profile.source.resolve()),
                    "combined": result.combined.name if result.combined else None,
                    "ranks": [[tag, path.name, shift] for tag, path, shift in ranks],
                    "warnings": list(result.warnings)}
        write_bytes(entry / MANIFEST, json.dumps(manifest, indent=1).encode("utf-8"))
    return MergedTrace(result.combined, entry, False, tuple(result.warnings), ranks, tuple(result.ranks))


def prune(root: Path, keep: int) -> list[Path]:
    """Removes all but the ``keep`` newest complete entries of ``root`` (by their manifest's
    time), and entries without a manifest untouched for :data:`STALE_SECONDS` (left by a merge
    killed outright); returns what it removed. Entries being written (young, no manifest yet)
    are left alone, and so is everything that is not an entry a merge wrote
    (:func:`_own_entries`)."""
    complete, removed = [], []
    now = time.time()
    for entry in _own_entries(root):
        try:
            complete.append(((entry / MANIFEST).stat().st_mtime, entry))
        except OSError:  # no manifest: a partial entry, or one being written
            if is_stale(entry, now):
                removed.append(entry)
    complete.sort(reverse=True)
    removed += [entry for _, entry in complete[keep:]]
    for entry in removed:
        shutil.rmtree(entry, ignore_errors=True)
    return removed
