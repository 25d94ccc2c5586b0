"""Start times that a float cannot hold to the nanosecond, kept exact.

Kineto before ``baseTimeNanoseconds`` (torch < 2.4) writes ``ts`` as Unix-epoch µs with ns
decimals (``1712195495505582.988``), and ROCm traces as µs since boot with decimals
(``6520618853487.683``). A float64 has 53 bits: at 1.7e15 µs its step is 0.25 µs, so the parse
alone moves a start by up to 125 ns (140 ns measured on such a trace); from about 9e12 µs (2^53
ns) no float holds every ns, below it the parse is exact. JSON parsers give no decimal type at
orjson's speed, so the text of every such ``ts`` is quoted before the parse (``"ts":
"1712195495505582.988"``) and :func:`tokentrace.units.us_to_ns` converts the string exactly. Only traces whose first MiB has
such a time pay for the rewrite.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

# A `ts` member with decimals from 9e12 µs on (2^53 ns: no float holds every ns beyond). Below,
# the parse is exact to the ns (ROCm's 6.5e12 µs since boot; every start of engine_kineto, 5.3e12
# µs, read alike either way), and the rewrite would cost a regex pass over the file.
_LONG_TS = re.compile(rb'("ts"\s*:\s*)(-?(?:9[0-9]{12}|[0-9]{14,})\.[0-9]+)(?=[\s,}])')
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")


def has_long_times(text: bytes) -> bool:
    """Whether ``text`` holds a ``ts`` that a float would round (see the module)."""
    return _LONG_TS.search(text) is not None


def quote_long_times(text: bytes) -> bytes:
    """``text`` with every such ``ts`` written as a JSON string of its exact digits."""
    return _LONG_TS.sub(rb'\1"\2"', text)


def exact_chunks(chunks: Iterator[bytes], look_bytes: int = 1 << 20) -> Iterator[bytes]:
    """The chunks of a trace, each such ``ts`` quoted when its first ``look_bytes`` hold one.

    A chunk is cut after its last comma and the rest carried to the next, so no number is
    split: a ``ts`` and its value hold no comma, and a value ends before one.
    """
    head: list[bytes] = []
    size = 0
    for chunk in chunks:
        head.append(chunk)
        size += len(chunk)
        if size >= look_bytes:
            break
    if not has_long_times(b"".join(head)):
        yield from head
        yield from chunks
        return
    carry = b""
    for chunk in itertools.chain(head, chunks):
        text = carry + chunk
        cut = text.rfind(b",") + 1
        carry = text[cut:]
        if cut:
            yield quote_long_times(text[:cut])
    if carry:
        yield quote_long_times(carry)


def checkable(values: list) -> list:
    """``values`` with the quoted times as floats, for the range checks only (a string that is
    no number stays, and the check names it)."""
    return [float(v) if type(v) is str and _NUMBER.fullmatch(v) else v for v in values]
