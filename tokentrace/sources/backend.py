"""How the readers read their inputs, chosen in one place: the active
:class:`~tokentrace.options.RawOptions`.

It says whether a VizTracer report's events are copied byte for byte (:mod:`tokentrace.sources._raw`)
or parsed whole and written back (the fallback), the sizes those copies and scans read at a
time, and when a GPU trace (Proton document, torch-profiler file) is read a piece of its events
at a time (:mod:`tokentrace.sources.proton_pieces`). The readers ask :func:`current`; no
signature carries the options.

The merge installs ``MergeOptions.raw`` once at each task's entry
(:func:`~tokentrace.merge.rank.merge_rank`, run in the worker process that merges the rank, and
:func:`~tokentrace.merge.combine.merge_combined`) with :func:`reading`. A forked child (the host
copy) inherits it; the host copy's thread runs in a copy of its creator's context. Outside a
merge the defaults hold; tests and notebooks choose other ones with ``with reading(...)``.

:func:`recording_passes` lets a caller see which way a GPU reader read a file (whole or in
pieces, and how many; a second pass is the fallback when the pieces did not parse).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

from tokentrace.options import RawOptions

_ACTIVE: ContextVar[RawOptions] = ContextVar("tokentrace_raw_options", default=RawOptions())
_PASSES: ContextVar[list[ReadPass] | None] = ContextVar("tokentrace_read_passes", default=None)


def current() -> RawOptions:
    """The reading configuration in force here (the defaults unless :func:`reading` set one)."""
    return _ACTIVE.get()


@contextlib.contextmanager
def reading(options: RawOptions) -> Iterator[RawOptions]:
    """Reads with ``options`` inside the block (in this thread or task, and in the children it
    forks); the configuration before it is back after."""
    token = _ACTIVE.set(options)
    try:
        yield options
    finally:
        _ACTIVE.reset(token)


@dataclasses.dataclass
class ReadPass:
    """One pass of a GPU reader over a file (a Proton document), from when it starts taking
    events: a whole read once its text parsed, a piecewise one once its array was found.

    Attributes:
        path: the file.
        piecewise: read a piece of its events at a time (else whole).
        pieces: the pieces of events taken so far (1 for a whole read).
    """

    path: Path
    piecewise: bool
    pieces: int = 0


def start_pass(path: Path, piecewise: bool) -> ReadPass:
    """A reader starts taking the events of ``path``: the record it counts its pieces on (kept in the list
    of :func:`recording_passes` when one is open)."""
    record = ReadPass(path, piecewise)
    passes = _PASSES.get()
    if passes is not None:
        passes.append(record)
    return record


@contextlib.contextmanager
def recording_passes() -> Iterator[list[ReadPass]]:
    """Inside the block, every pass a GPU reader makes over a file is appended to the list it
    yields, also when the read fails."""
    passes: list[ReadPass] = []
    token = _PASSES.set(passes)
    try:
        yield passes
    finally:
        _PASSES.reset(token)
