"""The tool's version, read from the installed package metadata (its one home is pyproject.toml)."""

from __future__ import annotations

import functools


@functools.cache
def tool_version() -> str:
    """The installed tokentrace version (``0+unknown`` in a source tree used uninstalled)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tokentrace")
    except PackageNotFoundError:
        return "0+unknown"
