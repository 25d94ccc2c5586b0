"""Fresh process/thread/flow ids for the merged file.

Perfetto reads pid/tid as uint32 and merges threads by tid, so every id the merge invents must
differ from every id already in the file. Fresh ids start above Linux's largest possible pid
(``pid_max`` <= 2**22) and skip any id the inputs use.
"""

from __future__ import annotations

from collections.abc import Iterable

FRESH_ID_START = 4_000_000_001
UINT32_MAX = 2**32 - 1


class IdAllocator:
    """Hands out ids unique in one output file, in call order (deterministic)."""

    def __init__(self, taken: Iterable[int] = (), start: int = FRESH_ID_START) -> None:
        self._taken = set(taken)
        self._next = start

    def take(self) -> int:
        """Returns the next free id.

        Raises:
            OverflowError: the uint32 range is exhausted (billions of threads: not a real trace).
        """
        while self._next in self._taken:
            self._next += 1
        if self._next > UINT32_MAX:
            raise OverflowError("no free uint32 id left for the merged trace")
        self._taken.add(self._next)
        self._next += 1
        return self._next - 1
