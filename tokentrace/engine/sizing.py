"""Which WebAssembly build a trace needs, decided before loading it.

Perfetto's trace processor keeps the whole parsed trace in its heap. The wasm32 build's heap ends
at 4 GiB, the memory64 build's at 16 GiB (and at what the machine can give). The heap a trace
needs grows linearly with its size: :data:`HEAP_BASE` plus :data:`HEAP_PER_INPUT_BYTE` bytes
per byte of (uncompressed) trace, measured on merged traces (``benchmarks/bench_engine.py
--replicate``).
That estimate picks the build, and refuses at once, with one line naming the native engine, a
trace that fits in neither, instead of failing after minutes of loading.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from tokentrace.engine.wasm_host import HEAP_MAX, HEAP_MAX_64, PAGE
from tokentrace.errors import EngineError

#: The heap of an instance that loaded a one-event trace (the request buffer included).
HEAP_BASE = 48 * 1024**2
#: Heap bytes per byte of uncompressed trace JSON, above HEAP_BASE. Measured (the heap as grown
#: after the load): merged t39_tp2 1.6 (replicated 16x, 1.66 GB), engine_kineto_stack 1.8
#: (Kineto, args on most events; 16x, 1.56 GB), the other merged serving sets 1.5-2.5 at
#: 74-168 MB; 2.0 errs on the large side where it matters, near the ceilings.
HEAP_PER_INPUT_BYTE = 2.0
#: Auto choice: wasm32 while the estimate stays under this share of its heap (queries need room
#: after the load: ``INCLUDE PERFETTO MODULE`` and joins allocate too); memory64 above.
WASM32_SHARE = 0.7
#: The share of the machine's memory the memory64 heap may take (the rest: Python, pandas).
RAM_SHARE = 0.8
NATIVE_REMEDY = "use a native trace_processor_shell: --engine native --shell PATH"
BUILDS = ("auto", "wasm32", "memory64")


@dataclasses.dataclass(frozen=True)
class HeapLimits:
    """The most heap each build may grow to, bytes."""

    wasm32: int = HEAP_MAX
    memory64: int = HEAP_MAX_64

    @classmethod
    def default(cls) -> HeapLimits:
        """The builds' ceilings, memory64's capped at :data:`RAM_SHARE` of this machine's (or
        this container's) memory, so a huge trace fails cleanly instead of being OOM-killed."""
        ram = usable_memory()
        cap = HEAP_MAX_64 if ram is None else int(ram * RAM_SHARE) // PAGE * PAGE
        return cls(HEAP_MAX, min(HEAP_MAX_64, cap))

    def for_build(self, memory64: bool) -> int:
        """The ceiling of one build."""
        return self.memory64 if memory64 else self.wasm32


def usable_memory() -> int | None:
    """Physical memory, or the cgroup's limit when lower; None when unknown."""
    found = []
    try:
        found.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not on this platform
        pass
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # "max" or a huge number: no limit
            found.append(int(text))
    return min(found) if found else None


def trace_input_bytes(path: Path) -> int:
    """The trace's size as the trace processor sees it: the file's, or for gzip the size its
    trailer records (ISIZE). That is modulo 4 GiB and the last member's only, so it can be too
    low, never too high: an estimate that is too low costs a wasm32 load that runs out of memory
    and is retried on memory64, one that is too high would refuse a trace that fits."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            if handle.read(2) != b"\x1f\x8b" or size < 18:
                return size
            handle.seek(-4, os.SEEK_END)
            inflated = int.from_bytes(handle.read(4), "little")
    except OSError:  # reading it fails again while loading, with the message that says why
        return 0
    return max(size, inflated)


def estimated_heap(input_bytes: int) -> int:
    """The heap a trace of ``input_bytes`` is expected to need once loaded."""
    return HEAP_BASE + int(input_bytes * HEAP_PER_INPUT_BYTE)


def choose_builds(input_bytes: int, limits: HeapLimits) -> list[bool]:
    """The builds to try in order (``True``: memory64): wasm32 with memory64 as the retry when
    the estimate is well inside the 4 GiB heap, memory64 alone above."""
    if estimated_heap(input_bytes) > limits.wasm32 * WASM32_SHARE:
        return [True]
    return [False, True]


def check_fits(trace: Path, input_bytes: int, memory64: bool, heap_max: int) -> None:
    """Raises, before loading, when ``trace`` is expected to need more heap than ``heap_max``.

    Raises:
        EngineError: one line: the sizes and the native engine remedy.
    """
    need = estimated_heap(input_bytes)
    if need <= heap_max:
        return
    build = "memory64" if memory64 else "wasm32"
    other = "" if memory64 else " (the memory64 build may fit it: leave the build on auto)"
    raise EngineError(
        f"{trace}: too large for the embedded trace processor: {input_bytes / 1e9:.2f} GB of "
        f"trace needs ~{need / 2**30:.1f} GiB of heap, more than the {_gib(heap_max)} the "
        f"{build} build can use here{other}; {NATIVE_REMEDY}")


def _gib(size: int) -> str:
    return f"{size / 2**30:.0f} GiB" if size >= 2**30 else f"{size / 2**20:.0f} MiB"


__all__ = ["BUILDS", "HEAP_BASE", "HEAP_PER_INPUT_BYTE", "HeapLimits", "check_fits", "choose_builds",
           "estimated_heap", "trace_input_bytes", "usable_memory"]
