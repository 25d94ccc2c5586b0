"""The GPU gap classes, once: name, meaning in one line, plot colour.

Which classes exist, and when a gap belongs to one, is decided by the SQL (``tt_gap_class`` in
``queries/tokentrace/gaps.sql``; the ``gap_class`` column of ``queries/gpu_gaps.sql``). This
table only says how the report, the plots and the terminal name and draw them, in the SQL's
order; ``tests/report/test_gap_classes.py`` checks that it lists exactly the SQL's classes.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GAP_CLASSES", "NAMES", "SHORT_IDLE", "GapClass", "color", "get", "idle_column"]


@dataclass(frozen=True)
class GapClass:
    """One class of GPU gap.

    Attributes:
        name: as the SQL writes it (``gap_class`` values, ``idle_<name>_ns`` columns).
        meaning: one line for a reader of the report.
        color: its colour in the plots (matplotlib colour text).
    """

    name: str
    meaning: str
    color: str


GAP_CLASSES: tuple[GapClass, ...] = (
    GapClass("host_late", "the host was still launching the next kernel (its launch call or scope "
             "was open, or had not begun) when the GPU went idle", "#d62728"),
    GapClass("graph_replay", "the next kernel belongs to a CUDA-graph replay launched before the "
             "gap: the GPU ran the graph on its own", "#9467bd"),
    GapClass("launch_overhead", "the next kernel was launched before the gap, and the gap is "
             "short (at most launch_overhead_us)", "#ff7f0e"),
    GapClass("gpu_queued", "the next kernel was launched before the gap, yet the GPU waited "
             "longer: on a dependency, a sync or another stream", "#1f77b4"),
    GapClass("no_link", "nothing on the host explains the next kernel (no launch call, no Proton "
             "scope): the launch time is unknown", "#7f7f7f"),
)

#: The class names in the SQL's order.
NAMES: tuple[str, ...] = tuple(c.name for c in GAP_CLASSES)

#: Not a gap class: ``step_breakdown``'s idle time in gaps shorter than min_gap_us
#: (``idle_short_ns``), drawn next to the classes.
SHORT_IDLE = GapClass("short", "idle in gaps shorter than min_gap_us", "#c7c7c7")

_BY_NAME = {c.name: c for c in (*GAP_CLASSES, SHORT_IDLE)}


def get(name: str) -> GapClass:
    """The class (or ``short``) called ``name``.

    Raises:
        KeyError: no such class.
    """
    return _BY_NAME[name]


def color(name: str) -> str:
    """The plot colour of a class (or ``short``); black for a name the table does not know, so
    a class added to the SQL first still draws."""
    found = _BY_NAME.get(name)
    return found.color if found else "black"


def idle_column(name: str) -> str:
    """The column holding a class's idle time in ``gpu_windows`` and ``step_breakdown``:
    ``idle_<name>_ns``."""
    return f"idle_{name}_ns"
