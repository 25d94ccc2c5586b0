"""What one recording is asked to do (:class:`RecordOptions`), checked before anything starts,
and the error a recording raises (:class:`RecordError`)."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from pathlib import Path

from tokentrace.errors import TokentraceError

#: The GPU profilers a recording can run: the package each one needs (``pip install <it>``), in words.
GPU_PROFILERS = {"torch": ("torch", "PyTorch"), "proton": ("triton", "Triton (its Proton profiler)")}

#: VizTracer's ring buffer, in entries (88 bytes each, reserved up front but touched only as
#: events come: a short window costs what it records). 5 million entries hold a few hundred steps
#: of a serving engine's scheduler; a window that overflows it loses its earliest host events.
DEFAULT_TRACER_ENTRIES = 5_000_000


class RecordError(TokentraceError):
    """A recording cannot start or finish: a profiler is not installed, the folder already holds
    this rank's files, a profiler failed. The message says what to do."""


@dataclasses.dataclass(frozen=True)
class RecordOptions:
    """One recording (:func:`tokentrace.record`, ``tokentrace record``)."""

    # The profile folder the files go to (made when missing).
    out: Path
    # The GPU profiler: "torch" (torch.profiler, CPU + CUDA activities) or "proton" (Triton Proton).
    gpu: str = "torch"
    # The rank in the file names when torch.distributed is not initialised when recording starts
    # (None: $RANK, as torchrun sets it, else 0).
    rank: int | None = None
    # Step marks (tokentrace.step()) to let pass before recording starts (0: start at once).
    skip: int = 0
    # Step marks to record, counted from the start; recording stops at the last one (None: until
    # the recording's block ends).
    steps: int | None = None
    # The profile id in the file names (None: the folder's name).
    profile_id: str | None = None
    # VizTracer's ring buffer, in entries (see DEFAULT_TRACER_ENTRIES).
    tracer_entries: int = DEFAULT_TRACER_ENTRIES

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", Path(self.out))

    @property
    def name(self) -> str:
        """The profile id of the file names."""
        return self.profile_id or Path(os.path.abspath(self.out)).name


def check(options: RecordOptions) -> None:
    """Checks ``options`` (:func:`check_values`) and that the profilers they need are installed
    (:func:`check_installed`).

    Raises:
        RecordError: a value is out of range, or a profiler's package is missing.
    """
    check_values(options)
    check_installed(options)


def check_values(options: RecordOptions) -> None:
    """Checks each value of ``options``.

    Raises:
        RecordError: a value is out of range.
    """
    if options.gpu not in GPU_PROFILERS:
        raise RecordError(f"the GPU profiler is one of {', '.join(GPU_PROFILERS)}, not {options.gpu!r}")
    for field, low in (("skip", 0), ("steps", 1), ("rank", 0), ("tracer_entries", 1000)):
        value = getattr(options, field)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < low):
            raise RecordError(f"{field.replace('_', ' ')} must be a whole number >= {low}, not {value!r}")
    name = options.name
    if not name or "/" in name or name.startswith("."):
        raise RecordError(f"profile id {name!r} cannot begin a file name; give a profile id")


def check_installed(options: RecordOptions) -> None:
    """Checks that VizTracer and the GPU profiler's package are installed, importing neither.

    Raises:
        RecordError: one is missing; the message names what to install.
    """
    needed = (GPU_PROFILERS[options.gpu], ("viztracer", "VizTracer"))
    missing = [(package, what) for package, what in needed if importlib.util.find_spec(package) is None]
    if missing:
        raise RecordError(f"recording with the {options.gpu} profiler needs {' and '.join(w for _, w in missing)}, "
                          f"not installed in this Python ({sys.executable}): "
                          f"pip install {' '.join(p for p, _ in missing)}")
