"""The one way tokentrace writes a file: into a uniquely named temp file in the target folder,
renamed over the target only when complete, mode 0666 less the user's umask (0644 under umask
022), the temp file removed on any error or interrupt. Merged traces, query tables, the report,
cache manifests and compiled modules all go through here.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from tokentrace.errors import InputError

GZIP_LEVEL = 1  # fast; merged traces are written often and read once
BUFFER_BYTES = 1 << 20
_UMASK_LOCK = threading.Lock()


def file_mode() -> int:
    """0666 less the process umask: what ``open()`` would give a new file."""
    with _UMASK_LOCK:  # reading the umask means setting it; keep other threads out meanwhile
        mask = os.umask(0o022)
        os.umask(mask)
    return 0o666 & ~mask


def cannot_write(target: Path, exc: OSError) -> InputError:
    """The one-line error for a failed write of ``target``."""
    return InputError(f"{target}: cannot write ({exc.strerror or exc})")


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """Yields a temp path beside ``target``; on a clean exit it becomes ``target``.

    Raises:
        InputError: the folder cannot be created or written, or the rename fails.
    """
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
    except OSError as exc:
        raise cannot_write(target, exc) from None
    temp = Path(name)
    try:
        yield temp  # what the body raises goes up as it is (the temp file still goes)
        try:
            os.chmod(temp, file_mode())
            os.replace(temp, target)
        except OSError as exc:
            raise cannot_write(target, exc) from None
    finally:
        with contextlib.suppress(OSError):
            temp.unlink()


def write_bytes(target: str | os.PathLike, data: bytes) -> Path:
    """Writes ``data`` to ``target`` atomically; returns the path."""
    with atomic_path(target) as temp:
        temp.write_bytes(data)
    return Path(target)


class Output:
    """``write(bytes)`` into the output; ``plain`` is the file itself when not compressed."""

    def __init__(self, write: Callable[[bytes], object], plain: BinaryIO | None) -> None:
        self.write, self.plain = write, plain

    def __call__(self, data: bytes) -> object:
        return self.write(data)


@contextlib.contextmanager
def atomic_output(target: Path, compress: bool) -> Iterator[Output]:
    """Yields a streaming ``write(bytes)`` (an :class:`Output`) into ``target``, gzip-compressed
    with ``compress`` (mtime 0, no name: the same inputs give the same bytes).

    Raises:
        InputError: the output cannot be written.
    """
    with atomic_path(target) as temp, open(temp, "wb", buffering=BUFFER_BYTES) as raw:
        if compress:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=GZIP_LEVEL,
                               mtime=0) as packed:
                yield Output(packed.write, None)
        else:
            yield Output(raw.write, raw)
