"""Safe, deterministic writing of merged files: temp file in the target folder, then rename."""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from tokentrace.errors import InputError

GZIP_LEVEL = 1  # fast; merged traces are written often and read once
BUFFER_BYTES = 1 << 20


class Output:
    """``write(bytes)`` into the output; ``plain`` is the file itself when not compressed."""

    def __init__(self, write: Callable[[bytes], object], plain: BinaryIO | None) -> None:
        self.write, self.plain = write, plain

    def __call__(self, data: bytes) -> object:
        return self.write(data)


@contextlib.contextmanager
def atomic_output(path: Path, compress: bool) -> Iterator[Output]:
    """Yields a ``write(bytes)`` (an :class:`Output`) into a temp file that replaces ``path``
    only on success.

    Raises:
        InputError: the output folder cannot be written.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise InputError(f"{path.parent}: cannot write the merged trace there ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb", buffering=BUFFER_BYTES) as raw:
            if compress:
                # mtime=0 and no file name: the same inputs give byte-identical output
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=GZIP_LEVEL, mtime=0) as packed:
                    yield Output(packed.write, None)
            else:
                yield Output(raw.write, raw)
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
