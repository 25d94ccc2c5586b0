"""The user cache's one bound in bytes, and what ``tokentrace cache list|clear`` shows and removes.

Everything tokentrace derives from a profile goes to the user cache folder
(:func:`tokentrace.runtime.files.cache_root`: ``$TOKENTRACE_CACHE_DIR``, else
``$XDG_CACHE_HOME/tokentrace``, default ``~/.cache/tokentrace``): merges (``merged/``), annotated
copies (``annotated/``) and compiled engine modules (``wasm/``). Its total size is held under
:func:`cache_limit` (:data:`DEFAULT_LIMIT_BYTES`, or ``$TOKENTRACE_CACHE_SIZE``): after each merge
the least recently used merge entries go first (:func:`trim`), never the one just used, and only
entries a merge wrote (:func:`tokentrace.merge.cache._own_entries`): the user's own files in a
cache folder they named stay.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import time
from pathlib import Path

from tokentrace.errors import InputError
from tokentrace.runtime.files import cache_root

#: Names the bound of the user cache: bytes, or with a unit (``500M``, ``2G``, ``1.5GiB``).
SIZE_ENV = "TOKENTRACE_CACHE_SIZE"
#: An entry without a manifest none of whose files was written for this long, seconds: left by a
#: merge killed outright (a running merge keeps writing its temp file), never to be completed.
STALE_SECONDS = 3600.0
#: The bound when ``$TOKENTRACE_CACHE_SIZE`` is unset: 2 GiB (a few runs of a 200 MB profile).
DEFAULT_LIMIT_BYTES = 2 << 30
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)
# Files of the other folders of the cache that tokentrace wrote (clear removes only those):
# annotated copies (tokentrace.view.prepare) and compiled modules (tokentrace.engine.wasm_module).
_ANNOTATED_NAME = re.compile(r".+\.[0-9a-f]{16}\.json(\.gz)?")
_MODULE_NAME = re.compile(r"trace_processor[a-z0-9_]*-[0-9a-f]{32}\.cwasm(\.digest)?")


def parse_size(text: str) -> int:
    """``"2G"`` -> 2147483648: bytes, or a number with a binary unit (K, M, G, T; ``B``/``iB`` ok).

    Raises:
        InputError: not such a size.
    """
    found = _SIZE.fullmatch(text or "")
    if not found:
        raise InputError(f"${SIZE_ENV}={text!r}: give a size in bytes, or with a unit: 500M, 2G")
    return int(float(found.group(1)) * _UNITS[found.group(2).lower()])


def cache_limit() -> int:
    """The user cache's bound in bytes: ``$TOKENTRACE_CACHE_SIZE`` when set, else
    :data:`DEFAULT_LIMIT_BYTES`.

    Raises:
        InputError: the variable holds no size.
    """
    text = os.environ.get(SIZE_ENV, "").strip()
    return parse_size(text) if text else DEFAULT_LIMIT_BYTES


def merged_root() -> Path:
    """Where merges go: ``merged/`` in the user cache folder."""
    return cache_root() / "merged"


def tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (no link followed; a file that goes meanwhile counts 0)."""
    total = 0
    with contextlib.suppress(OSError):
        if path.is_symlink() or path.is_file():
            return path.lstat().st_size
        for folder, _, files in os.walk(path):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(folder, name)).st_size
    return total


@dataclasses.dataclass(frozen=True)
class CacheEntry:
    """One merge entry of the cache.

    Attributes:
        path: its folder (``merged/<key>``).
        bytes: the size of its files.
        used: when it was last written or reused (its manifest's mtime, seconds since the
            epoch); None for an entry being written, or one a killed merge left.
        source: the profile folder it merged ('' when unknown).
        stale: an entry without a manifest whose files were last written over
            :data:`STALE_SECONDS` ago: a killed merge's, removed by :func:`trim`.
    """

    path: Path
    bytes: int
    used: float | None
    source: str
    stale: bool = False


def last_write(path: Path) -> float:
    """The newest modification time of ``path`` and of the files under it (no link followed),
    seconds since the epoch; 0.0 when none can be read."""
    newest = 0.0
    with contextlib.suppress(OSError):
        newest = path.lstat().st_mtime
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                newest = max(newest, os.lstat(os.path.join(folder, name)).st_mtime)
    return newest


def is_stale(entry: Path, now: float | None = None) -> bool:
    """Whether ``entry`` (one without a manifest) was left by a merge killed outright: nothing in
    it written for :data:`STALE_SECONDS`."""
    return (now if now is not None else time.time()) - last_write(entry) > STALE_SECONDS


def entries(root: Path | None = None) -> list[CacheEntry]:
    """The merge entries of ``root`` (default :func:`merged_root`), least recently used first."""
    from tokentrace.merge.cache import MANIFEST, _own_entries

    found = []
    now = time.time()
    for entry in _own_entries(root if root is not None else merged_root()):
        manifest = entry / MANIFEST
        try:
            used = manifest.stat().st_mtime
            source = json.loads(manifest.read_text(encoding="utf-8")).get("source") or ""
        except (OSError, ValueError, AttributeError):
            used, source = None, ""
        stale = not (entry / MANIFEST).exists() and is_stale(entry, now)
        found.append(CacheEntry(entry, tree_bytes(entry), used, str(source), stale))
    return sorted(found, key=lambda e: (e.used is not None, e.used or 0.0))


def touch(entry: Path) -> None:
    """Marks ``entry`` as used now (its manifest's mtime: what :func:`trim` orders by)."""
    from tokentrace.merge.cache import MANIFEST

    with contextlib.suppress(OSError):
        os.utime(entry / MANIFEST, follow_symlinks=False)


def trim(root: Path, limit: int, keep: Path | None = None) -> list[Path]:
    """Removes the entries killed merges left (:attr:`CacheEntry.stale`), then the least recently
    used complete merge entries of ``root`` until the whole user cache folder holds at most
    ``limit`` bytes; ``keep`` (the entry just used) stays whatever its size. Entries being
    written (no manifest yet, written to lately) stay; returns what was removed."""
    found = entries(root)
    removed: list[Path] = []
    for entry in found:
        if entry.stale and entry.path != keep:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    total = tree_bytes(cache_root())
    for entry in found:
        if total <= limit:
            break
        if entry.used is None or (keep is not None and entry.path == keep):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        total -= entry.bytes
        removed.append(entry.path)
    return removed


@dataclasses.dataclass(frozen=True)
class Usage:
    """What the user cache holds: its folder, bound, merge entries and the other folders' bytes."""

    root: Path
    limit: int
    entries: list[CacheEntry]
    folders: dict[str, int]

    @property
    def total(self) -> int:
        return tree_bytes(self.root)


def usage() -> Usage:
    """The user cache as ``tokentrace cache list`` shows it."""
    root = cache_root()
    folders = {name: tree_bytes(root / name) for name in ("annotated", "wasm") if (root / name).is_dir()}
    return Usage(root, cache_limit(), entries(merged_root()), folders)


def clear(modules: bool = False) -> tuple[int, int]:
    """Removes every merge entry and annotated copy tokentrace wrote in the user cache (and,
    with ``modules``, the compiled engine modules); returns (files or entries removed, bytes).
    Anything else there is left as it is."""
    count, freed = 0, 0
    for entry in entries(merged_root()):
        shutil.rmtree(entry.path, ignore_errors=True)
        count, freed = count + 1, freed + entry.bytes
    root = cache_root()
    for folder, pattern, wanted in (("annotated", _ANNOTATED_NAME, True), ("wasm", _MODULE_NAME, modules)):
        if not wanted or (root / folder).is_symlink() or not (root / folder).is_dir():
            continue
        for path in (root / folder).iterdir():
            if pattern.fullmatch(path.name) and not path.is_symlink() and path.is_file():
                size = path.stat().st_size
                with contextlib.suppress(OSError):
                    path.unlink()
                    count, freed = count + 1, freed + size
    return count, freed


def age(seconds_since_epoch: float | None) -> str:
    """``3 min ago``: how long ago an entry was used ('being written' for none)."""
    if seconds_since_epoch is None:
        return "being written (or left by a killed merge)"
    delta = max(0.0, time.time() - seconds_since_epoch)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if delta >= size:
            return f"{delta / size:.0f} {unit} ago"
    return f"{delta:.0f} s ago"


def human(size: int) -> str:
    """``1.5 GiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
