"""The bundled query catalogue: runnable ``.sql`` files and the ``tokentrace`` SQL modules."""

from __future__ import annotations

from pathlib import Path

SQL_PACKAGE = "tokentrace"


def bundled_dir() -> Path:
    """The folder of bundled queries (installed as ``tokentrace.sql``, or ``queries/`` in a
    source checkout)."""
    try:
        from importlib.resources import files
        folder = Path(str(files("tokentrace.sql")))
        if folder.is_dir():
            return folder
    except (ModuleNotFoundError, TypeError):
        pass
    import tokentrace
    return Path(tokentrace.__file__).parents[1] / "queries"


def module_sources() -> dict[str, str]:
    """PerfettoSQL modules of package ``tokentrace``: ``{"tokentrace.ranks": sql, ...}``."""
    root = bundled_dir() / SQL_PACKAGE
    modules = {}
    for path in sorted(root.rglob("*.sql")):
        dotted = ".".join(path.relative_to(root).with_suffix("").parts)
        modules[f"{SQL_PACKAGE}.{dotted}"] = path.read_text(encoding="utf-8")
    return modules
