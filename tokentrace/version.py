"""The tool's version, read from the installed package metadata (its one home is pyproject.toml)."""

from __future__ import annotations

import functools
import os
import re
import sys

_NAME = "tokentrace"
_METADATA = {"dist-info": "METADATA", "egg-info": "PKG-INFO"}  # the file of each kind of folder


@functools.cache
def tool_version() -> str:
    """The installed tokentrace version (``0+unknown`` in a source tree used uninstalled)."""
    found = _dist_info_version()
    if found is not None:
        return found
    # importlib.metadata (and the email parser it imports) costs about 20 ms a process: each
    # merge's worker asks for the version, on its critical path
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(_NAME)
    except PackageNotFoundError:
        return "0+unknown"


def _dist_info_version() -> str | None:
    """The ``Version`` of the first tokentrace ``.dist-info`` or ``.egg-info`` on ``sys.path``,
    in path order as :mod:`importlib.metadata` looks; None when none is found or the first
    cannot be read: then :mod:`importlib.metadata` decides."""
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:  # a zip file, a missing directory
            continue
        for name in names:
            stem, dot, kind = name.rpartition(".")
            if not dot or kind.lower() not in _METADATA \
                    or re.sub(r"[-_.]+", "_", stem.partition("-")[0]).lower() != _NAME:
                continue
            path = os.path.join(entry or ".", name)
            return _metadata_version(os.path.join(path, _METADATA[kind.lower()]) if os.path.isdir(path) else path)
    return None


def _metadata_version(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as metadata:
            for line in metadata:
                if line.startswith("Version:"):
                    return line.partition(":")[2].strip() or None
                if not line.strip():  # the headers end
                    return None
    except (OSError, UnicodeDecodeError):
        return None
    return None
