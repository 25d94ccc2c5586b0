"""The one way tokentrace writes a file: into a uniquely named temp file in the target folder,
renamed over the target only when complete, mode 0666 less the user's umask (0644 under umask
022) and never more open than the command's inputs (a 0600 input gives 0600 copies in 0700
folders: :func:`~tokentrace.runtime.journal.write_mask`), the temp file removed on any error or
interrupt. Merged traces, query tables, the report,
cache manifests and compiled modules all go through here.

Every replacement goes through the current :func:`~tokentrace.runtime.journal.journal` (all or nothing
per command); before any work, a command checks with :func:`refuse_inputs` that no output is
one of its inputs, which also bounds who may read its outputs by its inputs' modes.

The one user cache folder of tokentrace (:func:`cache_root`) is here too: compiled WebAssembly
modules (``wasm/``), merged profile folders whose own folder is read-only (``merged/``) and
annotated copies of merged traces (``annotated/``). ``$TOKENTRACE_CACHE_DIR`` when set, else
the platform's user cache (``$XDG_CACHE_HOME``, default ``~/.cache``) ``/tokentrace``. Created
0700 when missing (its missing parents too): it holds copies of traces, which hold source paths
and arguments, and on a shared machine only their owner may read those. A folder that exists is
left as it is (the user's choice); what is written inside it is no more readable than its
inputs (:func:`~tokentrace.runtime.journal.write_mask`).
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from tokentrace.errors import InputError, WriteError
from tokentrace.runtime.journal import (
    current_journal,
    inputs_mask,
    journal_mkdir,
    private_like,
    restrict,
    write_mask,
)
from tokentrace.runtime.signals import signals_held

__all__ = ["CACHE_ENV", "atomic_output", "atomic_path", "cache_root", "cannot_write", "file_mode", "make_folder",
           "open_for_writing", "private_like", "refuse_inputs", "remedy_for_writes", "write_bytes"]

GZIP_LEVEL = 1  # fast; merged traces are written often and read once
BUFFER_BYTES = 1 << 20
_UMASK_LOCK = threading.Lock()
# errors of a write that are the output's, not the input's: mapped to one line
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO, errno.EISDIR,
                 errno.ENOTDIR, errno.EACCES, errno.EPERM}
# errno -> (the state of the file system, what to do about it by default: the command's -o).
_ELSEWHERE = "write elsewhere (-o)"
_SPACE = "free some space or " + _ELSEWHERE
_HINTS = {
    errno.ENOSPC: ("the disk is full", _SPACE),
    errno.EDQUOT: ("the disk quota is used up", _SPACE),
    errno.EFBIG: ("the file is over the size limit (ulimit -f) of this shell or file system",
                  "raise it or " + _ELSEWHERE),
    errno.EROFS: ("the file system is read-only", _ELSEWHERE),
    errno.EACCES: ("no permission to write there", _ELSEWHERE),
    errno.EPERM: ("no permission to write there", _ELSEWHERE),
    errno.EISDIR: ("", "a folder has that name; choose another output name"),
    errno.ENOTDIR: ("", "a part of the path is a file, not a folder; choose another output path"),
}
# how a remedy other than -o (remedy_for_writes) joins the state, per errno
_REMEDIES = {errno.ENOSPC: "free some space, or {}", errno.EDQUOT: "free some space, or {}",
             errno.EFBIG: "raise it, or {}", errno.EROFS: "{}", errno.EACCES: "{}", errno.EPERM: "{}"}


def file_mode() -> int:
    """0666 less the process umask: what ``open()`` would give a new file."""
    with _UMASK_LOCK:  # reading the umask means setting it; keep other threads out meanwhile
        mask = os.umask(0o022)
        os.umask(mask)
    return 0o666 & ~mask


def cannot_write(target: Path, exc: OSError, remedy: str | None = None) -> WriteError:
    """The one-line error for a failed write of ``target``: path, reason, the file system's
    state (full, read-only ...) and what to do (``remedy`` in place of ``-o`` where given)."""
    return _write_error(str(target), exc.errno or 0, exc.strerror or str(exc), remedy)


def _write_error(path: str, code: int, reason: str, remedy: str | None) -> WriteError:
    state, todo = _HINTS.get(code, ("", ""))
    if remedy is not None and code in _REMEDIES:
        todo = _REMEDIES[code].format(remedy)
    return WriteError(path, code, reason, "; ".join(part for part in (state, todo) if part))


@contextlib.contextmanager
def remedy_for_writes(remedy: str, under: Path) -> Iterator[None]:
    """A failed write (:class:`~tokentrace.errors.WriteError`, from this process, a worker or a
    forked child) of a file under ``under`` says ``remedy`` instead of ``write elsewhere (-o)``:
    e.g. where a cache folder can be pointed elsewhere."""
    try:
        yield
    except WriteError as exc:
        if not Path(exc.path).is_relative_to(under) or exc.errno not in _REMEDIES:
            raise
        raise _write_error(exc.path, exc.errno, exc.reason, remedy) from None


def refuse_inputs(outputs: Iterable[Path | None], inputs: Iterable[Path | None]) -> None:
    """Checks, before any work, that no output would replace an input or a folder; then bounds
    the modes of what the command writes by the inputs' (:func:`~tokentrace.runtime.journal.restrict`).

    An output is an input when it is the same path, a hard link to it, or a symbolic link
    either way (compared by device and inode, and by resolved path).

    Raises:
        InputError: naming the output, the input, and what to do.
    """
    inputs, outputs = list(inputs), list(outputs)
    seen: dict[tuple[int, int], Path] = {}
    resolved: dict[Path, Path] = {}
    for path in inputs:
        if path is None:
            continue
        with contextlib.suppress(OSError):
            found = os.stat(path)
            seen[(found.st_dev, found.st_ino)] = Path(path)
        resolved[Path(path).resolve()] = Path(path)
    for output in outputs:
        if output is None:
            continue
        output = Path(output)
        same = resolved.get(output.resolve())
        try:
            found = os.stat(output)
        except OSError:
            found = None
        if same is None and found is not None:
            same = seen.get((found.st_dev, found.st_ino))
        if same is not None:
            how = "" if same == output else " (the same file, through a link)"
            raise InputError(f"{output}: this output would replace the input {same}{how}; "
                             "choose another output name or folder (-o)")
        if found is not None and os.path.isdir(output):
            raise InputError(f"{output}: cannot write the output file: a folder has that name; "
                             "choose another output name (-o)")
    restrict(inputs_mask(inputs), outputs)


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """Yields a temp path beside ``target``; on a clean exit it becomes ``target``.

    Raises:
        InputError: the folder cannot be created or written, the rename fails, or the body
            failed to write (no space, file-size limit ...).
    """
    target = Path(target)
    temp: Path | None = None
    try:
        try:
            with signals_held():  # a signal now would leave the temp file unknown to the cleanup
                journal_mkdir(target.parent)
                fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
                temp = Path(name)
                os.close(fd)
        except OSError as exc:
            raise cannot_write(target, exc) from None
        try:
            yield temp  # what the body raises goes up as it is (the temp file still goes) ...
        except OSError as exc:  # ... but a failed write of the output becomes one line
            if exc.errno in _WRITE_ERRNOS and not isinstance(exc, FileNotFoundError):
                raise cannot_write(target, exc) from None
            raise
        try:
            os.chmod(temp, file_mode() & write_mask(target))
            with signals_held():  # the old file moved aside is recorded before a signal acts
                active = current_journal()
                if active is not None:
                    active.track(target)
                os.replace(temp, target)
                temp = None
                if active is not None:
                    active.record(target)
        except OSError as exc:
            raise cannot_write(target, exc) from None
    finally:
        if temp is not None:
            with contextlib.suppress(OSError):
                temp.unlink()


def write_bytes(target: str | os.PathLike, data: bytes) -> Path:
    """Writes ``data`` to ``target`` atomically; returns the path."""
    with atomic_path(target) as temp, open_for_writing(temp) as out:
        out.write(data)
    return Path(target)


def open_for_writing(path: Path, buffering: int = -1) -> BinaryIO:
    """Opens ``path`` to write it from its start (created if missing), truncating it only when
    it holds bytes: never with ``O_TRUNC`` on an empty file.

    Why: ext4 (``auto_da_alloc``, on by default) marks a file truncated to size 0 and, when it
    is closed, starts writeback of everything written since, allocating its blocks inside
    ``close()``, which then blocks for a time that grows with the file (merged traces are tens
    to hundreds of MB; seen with strace), on the critical path. ``open(temp, "wb")`` on the
    empty temp file of :func:`atomic_path` did exactly that; the kernel writes the pages back
    later anyway. (That mark protects programs that rewrite a file in place without
    ``fsync``; tokentrace renames a complete temp file over its target instead.)
    """
    out = open(path, "wb", buffering=buffering, opener=_without_truncation)
    try:
        if os.fstat(out.fileno()).st_size:
            out.truncate(0)
    except BaseException:  # a signal too: the file object closes its descriptor once
        out.close()
        raise
    return out


def _without_truncation(path: str, flags: int) -> int:
    """``open``'s opener: the flags of mode ``"wb"`` less ``O_TRUNC``."""
    return os.open(path, flags & ~os.O_TRUNC, 0o666)


class Output:
    """``write(bytes)`` into the output; ``plain`` is the file itself when not compressed."""

    def __init__(self, write: Callable[[bytes], object], plain: BinaryIO | None) -> None:
        self.write, self.plain = write, plain

    def __call__(self, data: bytes) -> object:
        return self.write(data)


@contextlib.contextmanager
def atomic_output(target: Path, compress: bool,
                  on_open: Callable[[Path], None] | None = None) -> Iterator[Output]:
    """Yields a streaming ``write(bytes)`` (an :class:`Output`) into ``target``, gzip-compressed
    with ``compress`` (mtime 0, no name: the same inputs give the same bytes).

    Args:
        target: the output file.
        compress: gzip it.
        on_open: called with the temp file's path before anything is written (a reader that
            follows the output as it grows opens it there; it becomes ``target`` at the end).

    Raises:
        InputError: the output cannot be written.
    """
    with atomic_path(target) as temp, open_for_writing(temp, BUFFER_BYTES) as raw:
        if on_open is not None:
            on_open(temp)
        if compress:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=GZIP_LEVEL,
                               mtime=0) as packed:
                yield Output(packed.write, None)
        else:
            yield Output(raw.write, raw)


def make_folder(folder: Path) -> None:
    """Creates an output folder (and parents) that the journal removes again on rollback.

    Raises:
        InputError: it cannot be created.
    """
    try:
        journal_mkdir(Path(folder))
    except OSError as exc:
        raise cannot_write(Path(folder), exc) from None


# --- the user cache folder ------------------------------------------------------------------

#: Names the user cache folder (see :func:`cache_root`).
CACHE_ENV = "TOKENTRACE_CACHE_DIR"


def cache_root() -> Path:
    """The user cache folder, created (0700) when missing and possible."""
    named = os.environ.get(CACHE_ENV)
    if named:
        root = Path(named).expanduser()
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tokentrace"
    _make_private(root)
    return root


def _make_private(root: Path) -> None:
    """Creates ``root`` and its missing parents 0700 (makedirs gives parents 0777 - umask).
    Failing is not an error here: the write that needs the folder says why, naming it."""
    missing = []
    probe = root
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            continue
        except OSError:
            return
