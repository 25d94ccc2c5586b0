"""All or nothing per command: what a command wrote, undone when it fails or is signalled.

:func:`journal` records, for every target :func:`tokentrace.atomic.atomic_path` replaces (and
every folder it creates), what was there before; a failure puts it all back. Commands open
one through :func:`tokentrace.cleanup.command`; a cache entry has its own
(:mod:`tokentrace.merge.cache`). :func:`signals_held` keeps SIGINT, SIGTERM and SIGHUP back for
the few steps that must not be cut in two (a file created or moved and its record, a fork).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

_HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Holds SIGINT, SIGTERM and SIGHUP back (the kernel keeps them pending) for a few steps
    that must not be cut in two: a file created or moved and its record. Main thread only."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


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
            return
        for target, old in self.saved.items():
            if old is not None and os.path.lexists(target):
                _drop(old)
            elif old is not None:  # not written again: the old file stays
                _put_back(old, target)

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
    while _JOURNALS and _JOURNALS[-1].pid != os.getpid():  # a forked child's inherited copy
        _JOURNALS.pop()
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
    """Creates ``folder`` and its parents; the journal removes the ones it made on rollback."""
    if folder.is_dir():
        return
    missing = []
    probe = folder
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    folder.mkdir(parents=True, exist_ok=True)
    active = current_journal()
    if active is not None:
        active.folders += reversed(missing)
