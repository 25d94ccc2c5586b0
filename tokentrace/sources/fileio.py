"""Opening trace files: plain or gzip (told by the magic bytes, not the name), read in chunks."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import BinaryIO

GZIP_MAGIC = b"\x1f\x8b"
CHUNK_BYTES = 4 << 20


def is_gzip(path: Path) -> bool:
    """True when the file starts with the gzip magic bytes."""
    with open(path, "rb") as handle:
        return handle.read(2) == GZIP_MAGIC


def open_bytes(path: Path) -> BinaryIO:
    """Opens ``path`` for binary reading, decompressing gzip transparently."""
    if is_gzip(path):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")
