"""A folder's file list as a user sees it: every name under it (hidden ones too), with its size
and modification time; compared before and after a command that must write nothing there."""

from __future__ import annotations

import os
from pathlib import Path


def folder_state(folder: Path) -> dict[str, tuple[str, int, int]]:
    """``{relative path: (kind, size, mtime_ns)}`` for ``folder`` and everything under it (no
    link followed; the folder itself under ``"."``)."""
    state = {}
    for path in [folder, *sorted(folder.rglob("*"))]:
        info = os.lstat(path)
        kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
        state[str(path.relative_to(folder))] = (kind, info.st_size if kind == "file" else 0, info.st_mtime_ns)
    return state
