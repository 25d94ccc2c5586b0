"""One rank's queries shared by two engines when there are cores to spare (fewer ranks than
``jobs``): each process loads the rank's trace and runs half of the queries.

A query's cost is mostly the ``tokentrace.*`` modules it INCLUDEs, built once per engine (each
builds tables over every kernel or host slice of the trace). The modules form a chain
(``kernels`` < ``launches`` < ``gaps`` < ``stalls`` < ``causes``, ``steps``), so the split
follows it: the queries that need a *last* module of the chain (one that no other module
INCLUDEs: ``causes``, ``steps``) go to one engine, the others, which need only earlier modules,
to the second. The second engine builds those earlier modules again, in parallel: the wall
shortens by the second engine's own queries, for the CPU time of building the earlier modules
twice and a second heap.

Each bundled query's rows do not depend on which other queries ran in its engine (it only
INCLUDEs and SELECTs), so the tables are the same either way (tests/fleet/test_split.py). A
batch holding any other query is not split: its SQL may read what an earlier one created.

``tokentrace analyze``'s first run of a folder splits the same groups after one load instead:
the shared modules built once, then a forked copy of the engine (:mod:`.execute`), which parts
its group once more (:func:`split_again`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from tokentrace.catalog import find_query
from tokentrace.catalog.headers import SQL_PACKAGE, bundled_dir, module_sources
from tokentrace.engine.sizing import estimated_heap
from tokentrace.fleet.batch import is_step

_INCLUDE_RE = re.compile(r"INCLUDE\s+PERFETTO\s+MODULE\s+([\w.]+)\s*;", re.IGNORECASE)
# The modules of the runnable queries' own functions (one per query, read by that query alone)
_QUERY_MODULES = f"{SQL_PACKAGE}.queries."
#: At most this share of the machine's memory goes to the extra engines' heaps.
MEMORY_SHARE = 0.5


def groups_for_sizes(jobs: int, sizes: Sequence[int], requests: Sequence,
                     memory: int | None) -> list[list]:
    """The request groups each rank's engines run, for ranks of these trace sizes (bytes; the
    traces may not be written yet) and ``memory`` bytes (None: unknown): two
    (:func:`split_requests`) when ``jobs`` leaves at least two per rank, the requests split and
    the second engines' heaps fit in :data:`MEMORY_SHARE` of the memory; else the requests as
    one group."""
    whole = [list(requests)]
    if not sizes or jobs < 2 * len(sizes):
        return whole
    groups = split_requests(requests)
    if len(groups) < 2:
        return whole
    heaps = sum(estimated_heap(size) for size in sizes)
    return groups if memory is None or heaps <= memory * MEMORY_SHARE else whole


def split_requests(requests: Sequence) -> list[list]:
    """The requests in two groups, each in the given order: those that need a last module of
    the chain, then the others; a single group when either would be empty or a request is not
    a bundled query."""
    return _split_by(requests, _last_modules())


def split_again(requests: Sequence) -> list[list]:
    """A group :func:`split_requests` leaves whole (every query needs a last module of the
    chain) in two again, each in the given order: those that need one last module, then the
    others. The module is the one whose two parts need the most modules in common (built once,
    before the parts go their ways: :func:`shared_modules`). For the report's late queries it
    is ``gpu_waits``: both parts then share ``causes`` and ``steps``. A single group when no
    last module splits them."""
    splits = [groups for module in sorted(_last_modules())
              if len(groups := _split_by(requests, frozenset([module]))) == 2]
    return max(splits, key=lambda groups: len(shared_modules(groups)), default=[list(requests)])


def _split_by(requests: Sequence, modules: frozenset[str]) -> list[list]:
    """The requests in two groups: those whose query needs one of ``modules``, then the others
    (see :func:`split_requests`)."""
    queries = [r for r in requests if not is_step(r)]
    specs = [find_query(str(r.query)) for r in queries]
    bundled = bundled_dir().resolve()
    if not all(spec.path.resolve().parent == bundled for spec in specs):
        return [list(requests)]
    late_tables = {r.table for r, spec in zip(queries, specs) if _modules_of(spec.sql) & modules}
    # a step (a RankStep) runs in the engine of the queries it reads: with the late ones if any
    first = [r for r in requests if (set(r.needs) & late_tables if is_step(r) else r.table in late_tables)]
    second = [r for r in requests if r not in first]
    if any(is_step(r) and not set(r.needs) <= {q.table for q in group if not is_step(q)}
           for group in (first, second) for r in group):
        return [list(requests)]  # a step whose tables the split would part: one engine
    return [first, second] if first and second else [list(requests)]


@functools.cache
def _last_modules() -> frozenset[str]:
    """The analysis modules (not a runnable query's own ``tokentrace.queries.*``) that no other
    analysis module INCLUDEs: the end of the chain, the costly part of building it."""
    sources = {name: sql for name, sql in module_sources().items()
               if not name.startswith(_QUERY_MODULES)}
    included = {name for sql in sources.values() for name in _INCLUDE_RE.findall(sql)}
    return frozenset(set(sources) - included)


@functools.cache
def _modules_of(sql: str) -> frozenset[str]:
    """The bundled modules the SQL INCLUDEs, directly or through other modules."""
    sources = module_sources()
    found: set[str] = set()
    pending = [name for name in _INCLUDE_RE.findall(sql) if name.startswith(f"{SQL_PACKAGE}.")]
    while pending:
        name = pending.pop()
        if name in found or name not in sources:
            continue
        found.add(name)
        pending += _INCLUDE_RE.findall(sources[name])
    return frozenset(found)


def shared_modules(groups: Sequence[Sequence]) -> list[str]:
    """The bundled modules every group's queries INCLUDE (directly or not), sorted: built once
    before a loaded engine is forked for the groups (:mod:`.execute`)."""
    needed = [set().union(*(_modules_of(find_query(str(r.query)).sql) for r in group if not is_step(r)))
              for group in groups]
    return sorted(set.intersection(*needed)) if needed else []
