"""All or nothing per command: what a command wrote, undone when it fails or is signalled.

:func:`journal` records, for every target :func:`tokentrace.runtime.files.atomic_path` replaces
(and every folder it creates), what was there before; a failure puts it all back. Commands open
one through :func:`tokentrace.runtime.command.command`; a cache entry has its own
(:mod:`tokentrace.merge.cache`). :func:`~tokentrace.runtime.signals.signals_held` keeps SIGINT,
SIGTERM and SIGHUP back for the few steps that must not be cut in two (a file created or moved
and its record, a fork).

Who may read what is written: the permission bits of the command's inputs (:func:`restrict`,
from :func:`tokentrace.runtime.files.refuse_inputs`, or :func:`private_like` around a block) bound the
mode of every file and folder written meanwhile (:func:`write_mask`, :func:`folder_mask`), in
forked workers too: a trace that only its owner can read gives copies only its owner can read.
"""

from __future__ import annotations

import collections
import contextlib
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokentrace.runtime.signals import signals_held


class Journal:
    """What one command (or one cache entry) wrote, to undo it all on failure.

    A target is moved aside (``.<name>.<pid>.old``) just before it is first replaced; a folder
    tracked with :meth:`track_tree` remembers the files it held. :meth:`commit` drops the old
    copies (putting back those whose target was not written again); :meth:`rollback` removes
    what was written and puts the old files back. Only the process that opened it records.
    """

    def __init__(self, parent: Journal | None, independent: bool) -> None:
        self.pid = os.getpid()
        self.parent = None if independent else parent
        self.saved: dict[Path, Path | None] = {}  # target -> its old copy (None: it was new)
        self.trees: list[tuple[Path, frozenset[str]]] = []
        self.folders: list[Path] = []  # created, removed again (when empty) on rollback
        self.wrote: dict[Path, tuple[int, int]] = {}  # target -> (device, inode) written here
        self.mask = 0o777  # permission bits any file written under it may have (its inputs')

    def track(self, target: Path) -> None:
        """Moves ``target`` aside before it is written (once; a folder is left alone)."""
        target = Path(target)
        if target in self.saved or os.path.isdir(target):
            return
        with signals_held():
            old = None
            if os.path.lexists(target):
                old = target.with_name(f".{target.name}.{self.pid}.old")
                os.replace(target, old)
            self.saved[target] = old

    def record(self, target: Path) -> None:
        """Notes the file just written at ``target``: a rollback removes that file only, not
        one another process wrote there since."""
        with contextlib.suppress(OSError):
            found = os.stat(target)
            self.wrote[Path(target)] = (found.st_dev, found.st_ino)

    def track_tree(self, folder: Path) -> None:
        """Remembers the files of ``folder`` (each moved aside), so that files written there
        without :func:`atomic_path` are undone too."""
        folder = Path(folder)
        names = frozenset(p.name for p in folder.iterdir()) if folder.is_dir() else frozenset()
        for name in sorted(names):
            if (folder / name).is_file():
                self.track(folder / name)
        self.trees.append((folder, names))

    def commit(self) -> None:
        if self.parent is not None and self.parent.pid == os.getpid():
            for target, old in self.saved.items():
                if target in self.parent.saved:
                    _drop(old)
                else:
                    self.parent.saved[target] = old
            self.parent.trees += self.trees
            self.parent.folders += self.folders
            self.parent.wrote.update(self.wrote)
            self.parent.mask &= self.mask  # the rest of the command writes from the same inputs
            return
        mask = self.mask & write_mask()
        for target, old in self.saved.items():
            if old is not None and not os.path.lexists(target):  # not written again: it stays
                _put_back(old, target)
                continue
            _drop(old)
            # Files a worker wrote for this journal have its mask even where the worker did not
            # inherit it (a spawned or forkserver process): what a fork gives, checked here.
            if mask != 0o777 and self.wrote.get(target, _identity(target)) == _identity(target):
                _tighten(os.fspath(target), mask)

    def rollback(self) -> None:
        kept = set(self.saved) | {old for old in self.saved.values() if old is not None}
        for folder, before in self.trees:
            if folder.is_dir():
                for path in folder.iterdir():
                    if path.name not in before and path.is_file() and path not in kept:
                        _drop(path)
        for target, old in self.saved.items():
            if old is not None:
                _put_back(old, target)
            elif self.wrote.get(target, _identity(target)) == _identity(target):
                _drop(target)  # ours (or a worker's), not a file another run wrote since
        for folder in reversed(self.folders):
            with contextlib.suppress(OSError):
                folder.rmdir()


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _drop(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _put_back(old: Path, target: Path) -> None:
    with contextlib.suppress(OSError):
        os.replace(old, target)


_JOURNALS: list[Journal] = []


def current_journal() -> Journal | None:
    """The innermost journal opened by this process, None without one."""
    global _INHERITED_MASK
    while _JOURNALS and _JOURNALS[-1].pid != os.getpid():  # a forked child's inherited copy
        _INHERITED_MASK &= _JOURNALS.pop().mask  # a worker writes as privately as its parent
    return _JOURNALS[-1] if _JOURNALS else None


@contextlib.contextmanager
def journal(independent: bool = False) -> Iterator[Journal]:
    """Makes the writes inside all or nothing (see :class:`Journal`).

    Nested, it hands what it wrote to the enclosing journal on success, so that the outer
    failure still undoes it; ``independent`` commits for itself (a complete cache entry stays
    even when the command fails later).
    """
    opened = Journal(current_journal(), independent)
    _JOURNALS.append(opened)
    try:
        yield opened
    except BaseException:
        with signals_held():
            _JOURNALS.remove(opened)
            opened.rollback()
        raise
    with signals_held():
        _JOURNALS.remove(opened)
        opened.commit()


def journal_mkdir(folder: Path) -> None:
    """Creates ``folder`` and its parents (each no more open than :func:`folder_mask` allows);
    the journal removes the ones it made on rollback."""
    if folder.is_dir():
        return
    missing = []
    probe = folder
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    mode = folder_mask(write_mask(folder))
    for path in reversed(missing):  # one by one: mkdir(parents=True) gives parents 0777 - umask
        try:
            os.mkdir(path, mode)
        except FileExistsError:
            if not path.is_dir():
                raise
            continue  # made meanwhile by another process: not ours
        _MADE.append(os.path.abspath(path))
    active = current_journal()
    if active is not None:
        active.folders += reversed(missing)


# --- who may read what is written ------------------------------------------------------------

_SCOPED_MASKS: list[int] = []  # private_like blocks open in this process
_INHERITED_MASK = 0o777  # masks of a forked parent's journals (see current_journal)
# Outputs named with their inputs while no journal was open (a library merge()): their masks
# by absolute path, files and their folders; bounded (oldest dropped).
_OUTPUT_MASKS: dict[str, int] = {}
_OUTPUT_MASKS_KEPT = 4096
# Folders this process created (absolute): tightened when the inputs become known after them
# (a merge cache's folder is made before the merge names its inputs).
_MADE: collections.deque[str] = collections.deque(maxlen=512)


def inputs_mask(inputs: Iterable[str | os.PathLike | None]) -> int:
    """The permission bits a copy of ``inputs`` may have: those every input has (a folder's
    ``x`` bits left out), always read and write for the owner; 0o666 without inputs. Inputs
    that cannot be read are skipped (their own error comes later)."""
    mask = 0o666
    for path in inputs:
        if path is None:
            continue
        try:
            mask &= stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            continue
    return (mask | 0o600) & 0o666


def folder_mask(file_mask: int) -> int:
    """The bits of a folder holding files of ``file_mask``: whoever may read them may list and
    enter it (``r`` gives ``r-x``), the owner always ``rwx``: 0o600 gives 0o700, 0o644 0o755."""
    return (file_mask | ((file_mask & 0o444) >> 2) | 0o700) & 0o777


def write_mask(target: str | os.PathLike | None = None) -> int:
    """The permission bits a file written now (at ``target``) may have: the masks of every
    journal open (the parent's too, in a forked worker), of :func:`private_like` blocks, and of
    ``target`` as an output named by :func:`restrict` with no journal open."""
    mask = 0o777 & _INHERITED_MASK
    for opened in list(_JOURNALS):
        mask &= opened.mask
    for scoped in list(_SCOPED_MASKS):
        mask &= scoped
    if target is not None:
        mask &= _OUTPUT_MASKS.get(os.path.abspath(target), 0o777)
    return mask


@contextlib.contextmanager
def private_like(inputs: Iterable[str | os.PathLike | None]) -> Iterator[int]:
    """Inside, every file and folder written is no more open than ``inputs`` (yields the mask)."""
    mask = inputs_mask(inputs)
    _SCOPED_MASKS.append(mask)
    try:
        yield mask
    finally:
        _SCOPED_MASKS.remove(mask)


def restrict(mask: int, outputs: Iterable[str | os.PathLike | None] = ()) -> None:
    """From now on, what the current command writes (the innermost journal, or ``outputs`` when
    none is open) is no more open than ``mask``; what its journals and this process already
    created for it (cache folders, an entry's first files) is tightened now."""
    outputs = [os.path.abspath(p) for p in outputs if p is not None]
    active = current_journal()
    if active is not None:
        active.mask &= mask
    for output in outputs:
        for key in (output, os.path.dirname(output)):
            _OUTPUT_MASKS[key] = _OUTPUT_MASKS.pop(key, 0o777) & mask
    while len(_OUTPUT_MASKS) > _OUTPUT_MASKS_KEPT:
        del _OUTPUT_MASKS[next(iter(_OUTPUT_MASKS))]
    chain = [j for j in _JOURNALS if j.pid == os.getpid()]
    folders = {os.path.abspath(f) for j in chain for f in j.folders}
    files = {os.path.abspath(f) for j in chain for f in j.wrote}
    near = folders | files | set(outputs)
    folders |= {made for made in _MADE if any(p.startswith(made + os.sep) for p in near)}
    for path in files:
        _tighten(path, mask)
    for path in folders:
        _tighten(path, folder_mask(mask))


def _tighten(path: str, mask: int) -> None:
    """Clears the bits of ``path`` outside ``mask`` (never through a link)."""
    with contextlib.suppress(OSError):
        found = os.lstat(path)
        if not stat.S_ISLNK(found.st_mode) and stat.S_IMODE(found.st_mode) & ~mask:
            os.chmod(path, stat.S_IMODE(found.st_mode) & mask)
