"""``tokentrace diff``: two runs compared rank by rank, cause by cause.

:mod:`.runs` reads or computes each run's query tables, :mod:`.tables` joins them,
:mod:`.verdict` words the change, :mod:`.html` writes ``diff.html``, :mod:`.pipeline` ties them.

``tokentrace.diff(before, after)`` calls :func:`diff`: this package is callable, so the name
works whether Python resolves it to the package or to the function.
"""

import sys
import types

from tokentrace.diff.pipeline import DIFF_TABLES, DiffResult, compare, diff, write_diff
from tokentrace.diff.runs import DIFF_QUERIES, RunTables, load_run

__all__ = ["DIFF_QUERIES", "DIFF_TABLES", "DiffResult", "RunTables", "compare", "diff", "load_run",
           "write_diff"]


class _CallablePackage(types.ModuleType):
    """``tokentrace.diff(before, after)``: the package called is :func:`diff` called."""

    def __call__(self, before, after, *args, **kwargs) -> DiffResult:
        return diff(before, after, *args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
