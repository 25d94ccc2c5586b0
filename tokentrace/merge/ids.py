"""Fresh process/thread/flow ids for the merged file.

Perfetto reads pid/tid as uint32 and merges threads by tid, so every id the merge invents must
differ from every id already in the file. Fresh ids start above Linux's largest possible pid
(``pid_max`` <= 2**22) and skip any id the inputs use.
"""

from __future__ import annotations

from collections.abc import Iterable

FRESH_ID_START = 4_000_000_001
UINT32_MAX = 2**32 - 1
# In a combined file each rank's GPU process and threads take ids from a range of their own
# (rank index i: FRESH_ID_START + i * RANK_ID_RANGE on), so a worker can write its rank's part
# without knowing the other ranks' ids; ids the merge invents for rewritten host ids come after
# every rank's range (:func:`combined_ids`).
RANK_ID_RANGE = 1 << 14


def rank_ids(index: int, taken: Iterable[int]) -> IdAllocator:
    """The allocator of rank ``index``'s GPU ids in a combined file (raises OverflowError
    past its range: a rank with more than 16k GPU threads takes the rewriting path)."""
    start = FRESH_ID_START + index * RANK_ID_RANGE
    return IdAllocator(taken, start, stop=start + RANK_ID_RANGE - 1)


def combined_ids(n_ranks: int, taken: Iterable[int]) -> IdAllocator:
    """The allocator of a combined file's rewritten host ids (and the GPU ids of the ranks
    written by rewriting): above every rank's range."""
    return IdAllocator(taken, FRESH_ID_START + n_ranks * RANK_ID_RANGE)


def flow_base(index: int) -> int:
    """The first launch->kernel flow id of rank ``index`` in a combined file (1 in a per-rank
    file): ``index << 32 | 1``, so a rank's ids need no count of the ranks before it."""
    return (index << 32) + 1


class IdAllocator:
    """Hands out ids unique in one output file, in call order (deterministic)."""

    def __init__(self, taken: Iterable[int] = (), start: int = FRESH_ID_START, stop: int = UINT32_MAX) -> None:
        self._taken = set(taken)
        self._next = start
        self._stop = stop

    def take(self) -> int:
        """Returns the next free id.

        Raises:
            OverflowError: the uint32 range is exhausted (billions of threads: not a real trace).
        """
        while self._next in self._taken:
            self._next += 1
        if self._next > self._stop:
            raise OverflowError("no free uint32 id left for the merged trace")
        self._taken.add(self._next)
        self._next += 1
        return self._next - 1
