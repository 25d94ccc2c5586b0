"""The GPU side of a recording: the torch profiler or Triton Proton, each imported only here,
when a recording starts.

* torch: ``torch.profiler.profile`` with the CPU and CUDA activities (the CPU activity holds the
  runtime's launch calls, which link each kernel to its launch), ``with_stack=False`` (VizTracer
  records the Python frames), written by ``export_chrome_trace``; torch >= 2.4 writes the clock
  anchor ``baseTimeNanoseconds`` into it.
* proton: ``proton.start(name, data="trace", backend="cupti", hook="triton")``: a chrome trace
  (not the aggregated hatchet tree), kernel times from CUPTI and Triton's launch hook; written by
  ``proton.finalize()``. triton >= 3.9 writes the clock anchor; older Proton writes none, and the
  merge estimates the offset from the launches (docs/alignment.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tokentrace.record.names import RankPaths
from tokentrace.record.options import RecordError


def gpu_trace(paths: RankPaths) -> TorchTrace | ProtonTrace:
    """The GPU profiler ``paths.gpu`` names, made but not started.

    Raises:
        RecordError: its package cannot be imported.
    """
    return ProtonTrace(paths) if paths.gpu == "proton" else TorchTrace(paths)


def _synchronize() -> None:
    """Waits for the kernels launched so far, so that the profiler's stop sees them end (a
    program that never imported torch launched none through it)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class TorchTrace:
    """torch.profiler over one window."""

    def __init__(self, paths: RankPaths) -> None:
        try:
            from torch.profiler import ProfilerActivity, profile
        except ImportError as exc:
            raise RecordError(f"gpu='torch': PyTorch cannot be imported ({exc}): pip install torch, "
                              "or record with gpu='proton'") from None
        self.path = paths.gpu_trace
        self._profile = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=False)

    def start(self) -> None:
        """Starts the profiler (CUPTI's set-up takes a moment: before VizTracer starts)."""
        self._profile.start()

    def stop(self) -> list[Path]:
        """Stops the profiler and writes its trace.

        Raises:
            RecordError: the trace cannot be written.
        """
        _synchronize()
        self._profile.stop()
        try:
            self._profile.export_chrome_trace(str(self.path))
        except OSError as exc:
            raise RecordError(f"{self.path}: cannot write the torch profiler's trace ({exc.strerror or exc})") from None
        return [self.path]


class ProtonTrace:
    """Triton Proton over one window."""

    def __init__(self, paths: RankPaths) -> None:
        try:
            import triton.profiler as proton
        except ImportError as exc:
            raise RecordError(f"gpu='proton': Triton's Proton cannot be imported ({exc}): pip install triton, "
                              "or record with gpu='torch'") from None
        self._proton = proton
        self._name = paths.proton_name

    def start(self) -> None:
        """Starts Proton with its chrome-trace output and Triton's launch hook.

        Raises:
            RecordError: this Proton has no chrome-trace output.
        """
        try:
            self._proton.start(str(self._name), data="trace", backend="cupti", hook="triton")
        except TypeError as exc:  # a Proton without data=: it writes only the hatchet tree
            raise RecordError(f"this triton's Proton cannot write a trace ({exc}); tokentrace reads "
                              "Proton's chrome trace (data='trace'): upgrade triton, or record with gpu='torch'") from None

    def stop(self) -> list[Path]:
        """Stops Proton; it writes ``<name>.chrome_trace`` (or ``.part_<N>`` pieces).

        Raises:
            RecordError: Proton wrote no chrome trace.
        """
        _synchronize()
        self._proton.finalize()
        stem = self._name.name + "."
        written = sorted(p for p in self._name.parent.iterdir()
                         if p.name.startswith(stem) and p.name.endswith(".chrome_trace"))
        if not written:
            raise RecordError(f"Proton wrote no {self._name.name}*.chrome_trace in {self._name.parent}; "
                              "see Proton's messages above (a CUDA graph captured before recording "
                              "started makes Proton 3.9's finalize fail)")
        return written
