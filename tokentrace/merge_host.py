"""Copying a rank's host (VizTracer) events in a thread while the Proton side is prepared.

Reading, inflating and writing the report release the GIL (file I/O, zlib), so the copy of a
55 MB report runs mostly in parallel with the Proton parsing on the main thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from tokentrace.sources.viztracer import VizInfo, copy_events


class _Cancelled(Exception):
    """Raised inside the copy thread when the main thread gave up."""


class HostCopy:
    """Runs :func:`copy_events` in a thread; a context manager that never leaves it running.

    Usage: ``with HostCopy(path, sink) as copy: ...; info = copy.result()``. When the body
    raises, the copy is stopped at its next chunk before the exception leaves the block, so the
    output file is never written after it was closed.
    """

    def __init__(self, path: Path, sink: Callable[[bytes], None]) -> None:
        self._path, self._sink = path, sink
        self._cancel = threading.Event()
        self._info: VizInfo | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tokentrace-host-copy", daemon=True)

    def __enter__(self) -> "HostCopy":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._cancel.set()
        self._thread.join()

    def result(self) -> VizInfo:
        """Waits for the copy; re-raises its error (an :class:`InputError` names the file)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._info is not None  # set whenever no error was stored
        return self._info

    def _run(self) -> None:
        try:
            self._info = copy_events(self._path, self._write)
        except _Cancelled:
            pass
        except BaseException as exc:  # re-raised on the main thread by result()
            self._error = exc

    def _write(self, data: bytes) -> None:
        if self._cancel.is_set():
            raise _Cancelled
        self._sink(data)
