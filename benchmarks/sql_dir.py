"""Runs the benchmarks against another copy of the bundled SQL (``queries/``), e.g. the committed
one, to measure a SQL change before/after in one run with the same Python code.

``use_sql_dir(path)`` points the catalogue (bundled queries and the ``tokentrace.*`` modules) at
``path`` for this process; ``CHILD_PATCH`` does the same in a child process started with
``python -c`` when ``$TT_SQL_DIR`` is set. Nothing of tokentrace is edited: the functions are
replaced in the running interpreter only.
"""

from __future__ import annotations

from pathlib import Path

CHILD_PATCH = (
    "import os\n"
    "if os.environ.get('TT_SQL_DIR'):\n"
    "    import sys; sys.path.insert(0, os.environ['TT_BENCH_DIR'])\n"
    "    from sql_dir import use_sql_dir; use_sql_dir(os.environ['TT_SQL_DIR'])\n"
)


def use_sql_dir(path: str | Path | None) -> None:
    """Makes ``path`` the folder of bundled queries for this process (None: no change)."""
    if not path:
        return
    folder = Path(path).resolve()
    if not (folder / "tokentrace").is_dir():
        raise SystemExit(f"{folder}: not a queries folder (no tokentrace/ modules in it)")
    from tokentrace.catalog import headers, load

    headers.bundled_dir = lambda: folder
    load.bundled_dir = lambda: folder
