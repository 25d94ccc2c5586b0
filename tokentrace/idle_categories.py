"""The categories of ``idle_budget``, once: name, meaning in one line, plot colour.

``idle_budget`` (``queries/idle_budget.sql``) splits each rank's GPU idle time into these
categories, each gap counted once, so they add up to the rank's GPU idle time: the one
decomposition the console, the report and the plots show. Which gap goes where is decided by
the SQL; this table only says how they are named and drawn, in the SQL's documented order;
``tests/report/test_idle_categories.py`` checks that it lists exactly the SQL's categories.
"""

from __future__ import annotations

from tokentrace import gap_classes
from tokentrace.gap_classes import GapClass

__all__ = ["CATEGORIES", "HOST_CAUSED", "NAMES", "color", "legend", "meaning"]

#: The categories in the SQL's order (``idle_budget.category``'s column doc).
CATEGORIES: tuple[GapClass, ...] = (
    GapClass("startup", "gaps among the rank's first kernels in which the host set up (a module "
             "load, CUDA or NCCL initialisation, a compile, an op's slow first call): not counted "
             "as stalls", "#8c564b"),
    GapClass("host_busy", "the host ran code (a Python frame or a C call) instead of launching",
             "#d62728"),
    GapClass("host_blocking", "the host slept or waited (sleep, lock, socket or file read)",
             "#ff9896"),
    GapClass("host_sync", "the host waited for the GPU (.item(), .cpu(), synchronize), then "
             "caught up serially", "#e377c2"),
    GapClass("host_gil", "the launching thread waited for the GIL another thread held", "#bcbd22"),
    GapClass("host_gc", "Python's garbage collector ran on the launching thread", "#17becf"),
    GapClass("host_unknown", "the host was late, but no traced frame of the launching thread "
             "overlaps the gap", "#f7b6d2"),
    GapClass("no_work", "the engine waited for work (a queue, condition or selector wait): "
             "idle no host code could have filled", "#dbdb8d"),
    GapClass("graph_replay", "inside or between CUDA-graph replays: the GPU ran the graph on "
             "its own", gap_classes.color("graph_replay")),
    GapClass("gpu_wait", "the next kernel was already launched: the GPU waited on a "
             "dependency, a sync, another stream or launch overhead",
             gap_classes.color("gpu_queued")),
    GapClass("untraced", "no host trace explains the gap: the kernel's launch is unknown, or "
             "the gap lies before or after the host trace", gap_classes.color("no_link")),
    GapClass("short_gaps", "gaps shorter than min_gap_us between back-to-back kernels: "
             "per-launch overhead", gap_classes.SHORT_IDLE.color),
)

#: The category names in the SQL's order.
NAMES: tuple[str, ...] = tuple(c.name for c in CATEGORIES)

#: The categories the host caused (steady host-caused gaps, by why the host was late).
HOST_CAUSED: tuple[str, ...] = tuple(n for n in NAMES if n.startswith("host_"))

_BY_NAME = {c.name: c for c in CATEGORIES}


def meaning(name: str) -> str:
    """The category's meaning in one line ('' for a name the table does not know)."""
    found = _BY_NAME.get(name)
    return found.meaning if found else ""


def color(name: str) -> str:
    """The category's plot colour; black for a name the table does not know, so a category
    added to the SQL first still draws."""
    found = _BY_NAME.get(name)
    return found.color if found else "black"


def legend(names) -> str:
    """``host_busy: the host ran code ...; short_gaps: ...`` for ``names`` in the SQL's order."""
    shown = set(names)
    return "; ".join(f"{c.name}: {c.meaning}" for c in CATEGORIES if c.name in shown)
