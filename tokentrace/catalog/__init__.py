"""The bundled query catalogue: the ``.sql`` files of ``queries/``, the typed functions they
call (purpose, parameters, columns), parameter validation and running them on an open engine.

:mod:`.headers` reads the files, :mod:`.functions` the functions' signatures and the calls,
:mod:`.params` types and renders values (durations ``*_us`` in µs for people, the argument
``*_ns`` in ns for the SQL), :mod:`.run` runs, adding the rank identity after ``rank``
(:mod:`.identity`), :mod:`.docs` writes the Markdown table of the queries into
``docs/stall-queries.md``.
"""

from tokentrace.catalog.headers import (
    SQL_PACKAGE,
    Column,
    QuerySpec,
    bundled_dir,
    find_query,
    list_queries,
    load_spec,
    module_sources,
)
from tokentrace.catalog.identity import RANK_IDENTITY
from tokentrace.catalog.load import open_trace
from tokentrace.catalog.params import Param, parse_assignments
from tokentrace.catalog.run import (
    apply_declared_types,
    effective_params,
    render_sql,
    run_queries,
    run_query,
)

__all__ = [
    "RANK_IDENTITY", "SQL_PACKAGE", "Column", "Param", "QuerySpec", "apply_declared_types", "bundled_dir",
    "effective_params", "find_query", "list_queries", "load_spec", "module_sources", "open_trace",
    "parse_assignments", "render_sql", "run_queries", "run_query",
]
