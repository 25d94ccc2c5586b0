"""Query headers: where the bundled ``.sql`` files are, and what each one's comment header declares.

A runnable query starts with comment lines: the first says what it answers, then

```
-- @param min_gap_us DURATION_US>=0 100  Minimum idle time to report (µs).
-- @param rank STRING ''  Only this rank.
-- @column dur INT ns  Gap length.
```

Parameters are substituted into ``${name}`` placeholders as SQL literals rendered by
:mod:`tokentrace.catalog.params` from validated values, never as raw user text. A duration
``x_us`` (µs for the user) reaches the SQL as integer nanoseconds in ``${x_ns}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from tokentrace.catalog.params import Param, parse_param_line
from tokentrace.errors import QueryError

SQL_PACKAGE = "tokentrace"
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_COLUMN = re.compile(r"^@column\s+(\S+)\s+(\S+)\s+(\S+)\s*(.*)$")


@dataclass(frozen=True)
class Column:
    """An output column as documented: name, SQL type, unit (``ns``, ``count``, ``-``), doc."""

    name: str
    type: str
    unit: str
    doc: str


@dataclass(frozen=True)
class QuerySpec:
    """A runnable query: where it is, what it answers, what it takes and returns."""

    name: str
    path: Path
    purpose: str
    params: tuple[Param, ...] = ()
    columns: tuple[Column, ...] = ()
    sql: str = field(default="", repr=False)

    @property
    def is_cross_rank(self) -> bool:
        """True for a query in two parts, a per-rank map and a cross-rank reduce
        (:mod:`tokentrace.catalog.reduce`)."""
        from tokentrace.catalog.reduce import REDUCE_MARKER

        return REDUCE_MARKER.search(self.sql) is not None

    def param(self, name: str) -> Param | None:
        """The declared parameter called ``name``, or None."""
        return next((p for p in self.params if p.name == name), None)


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
    return Path(__file__).resolve().parents[2] / "queries"


def module_sources() -> dict[str, str]:
    """PerfettoSQL modules of package ``tokentrace``: ``{"tokentrace.ranks": sql, ...}``."""
    root = bundled_dir() / SQL_PACKAGE
    modules = {}
    for path in sorted(root.rglob("*.sql")):
        dotted = ".".join(path.relative_to(root).with_suffix("").parts)
        modules[f"{SQL_PACKAGE}.{dotted}"] = path.read_text(encoding="utf-8")
    return modules


def list_queries() -> list[QuerySpec]:
    """Every bundled runnable query, sorted by name."""
    return [load_spec(path) for path in sorted(bundled_dir().glob("*.sql"))]


def find_query(name_or_path: str | Path) -> QuerySpec:
    """Resolves a bundled name (``gpu_gaps`` or ``gpu_gaps.sql``) or a path to a ``.sql`` file.

    Raises:
        QueryError: neither a bundled query nor an existing file; the message lists the bundled.
    """
    text = str(name_or_path)
    bundled = bundled_dir() / (text if text.endswith(".sql") else f"{text}.sql")
    if "/" not in text and bundled.is_file():
        return load_spec(bundled)
    path = Path(text).expanduser()
    if path.is_file():
        return load_spec(path)
    names = ", ".join(spec.name for spec in list_queries())
    raise QueryError(f"unknown query {text!r}: not a bundled query ({names}) "
                     "and no such .sql file")


def load_spec(path: Path) -> QuerySpec:
    """Reads a ``.sql`` file and parses its header comments."""
    try:
        sql = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise QueryError(f"{path}: cannot read the query ({exc})") from None
    purpose, params, columns = _parse_header(path, sql)
    return QuerySpec(path.stem, path, purpose, tuple(params), tuple(columns), sql)


def _header_lines(sql: str) -> list[str]:
    lines = []
    for line in sql.splitlines():
        stripped = line.strip()
        if not stripped.startswith("--"):
            if stripped:
                break
            continue
        lines.append(stripped[2:].strip())
    return lines


def _parse_header(path: Path, sql: str) -> tuple[str, list[Param], list[Column]]:
    lines = _header_lines(sql)
    first_paragraph = []
    for line in lines:
        if not line or line.startswith("@"):
            break
        first_paragraph.append(line)
    purpose = " ".join(first_paragraph).split(":", 1)[-1].strip()
    params, columns = [], []
    last = None  # the list whose last entry a continuation line (indented text) extends
    for line in lines:
        if line.startswith("@param"):
            params.append(_unique(parse_param_line(line, where=str(path)), params, path))
            last = params
        elif line.startswith("@column"):
            match = _COLUMN.match(line)
            if not match:
                raise QueryError(f"{path}: bad @column line {line!r}; "
                                 "expected '@column NAME TYPE UNIT  doc'")
            columns.append(Column(*match.groups()))
            last = columns
        elif not line:
            last = None
        elif last is not None and not line.startswith("@"):
            last[-1] = replace(last[-1], doc=f"{last[-1].doc} {line}".strip())
    return purpose, params, columns


def _unique(param: Param, earlier: list[Param], path: Path) -> Param:
    """``param``, unless an earlier one has its name or its SQL placeholder name."""
    for other in earlier:
        if {param.name, param.sql_name} & {other.name, other.sql_name}:
            raise QueryError(f"{path}: @param {param.name} clashes with @param {other.name} "
                             f"(placeholders ${{{param.sql_name}}}, ${{{other.sql_name}}})")
    return param
