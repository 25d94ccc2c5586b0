"""The host side of a recording: VizTracer, with the settings the analysis needs.

* ``min_duration=0``: a kernel launch call lasts microseconds; a filter drops it and the gap
  before the kernel then has no launch to charge.
* C functions on (``ignore_c_function=False``): the launches are C calls (``torch.*``,
  ``cuda_utils.launch``, ``torch._C.replay``).
* ``log_gc=True``: the collector's own pauses; an automatic collection calls no ``gc.collect``,
  and without these events its pause looks like the running frame's work.
* ``max_stack_depth=-1``: every frame, so that a stall is named by the function that made it.
* every thread: on Python >= 3.12 VizTracer traces every thread of the process through
  ``sys.monitoring``; before 3.12, the threads that start after the recording does.
* the report is written by ``save()``, which carries the clock anchor the merge aligns by
  (``viztracer_metadata.baseTimeNanoseconds``).
"""

from __future__ import annotations

import warnings
from pathlib import Path

from tokentrace.errors import TokentraceWarning
from tokentrace.record.options import RecordError


class HostTrace:
    """VizTracer over one window: :meth:`start`, :meth:`stop`, then :meth:`save`."""

    def __init__(self, path: Path, tracer_entries: int) -> None:
        try:
            from viztracer import VizTracer
        except ImportError as exc:
            raise RecordError(f"VizTracer cannot be imported ({exc}): pip install viztracer") from None
        self.path = path
        self._tracer = VizTracer(output_file=str(path), tracer_entries=tracer_entries, verbose=0,
                                 min_duration=0, ignore_c_function=False, log_gc=True, max_stack_depth=-1)

    def start(self) -> None:
        """Starts tracing (this thread, and the others as :mod:`this module <.host>` says)."""
        self._tracer.start()

    def stop(self) -> None:
        """Stops tracing; the events stay in the buffer until :meth:`save`."""
        self._tracer.stop()

    def save(self) -> Path:
        """Writes the report, and warns when the ring buffer wrapped (the window's earliest host
        events are lost).

        Raises:
            RecordError: the report cannot be written.
        """
        try:
            self._tracer.save()
        except OSError as exc:
            raise RecordError(f"{self.path}: cannot write VizTracer's report ({exc.strerror or exc})") from None
        meta = getattr(self._tracer, "data", None) or {}
        if meta.get("viztracer_metadata", {}).get("overflow"):
            warnings.warn(f"{self.path.name}: VizTracer's buffer of {self._tracer.tracer_entries:,} entries "
                          "wrapped, so the window's earliest host events are lost; record fewer steps "
                          "(steps=, --steps) or raise tracer_entries (--tracer-entries)", TokentraceWarning,
                          stacklevel=2)
        self._tracer.terminate()
        self._tracer.clear()  # the program goes on: give back the parsed events and the buffer's entries
        self._tracer.data = {}
        return self.path
