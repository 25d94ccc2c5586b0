"""Runnable queries: where the bundled ``.sql`` files are, and what each one declares.

A runnable query is one ``SELECT * FROM f(arguments)`` of a typed table function
(:mod:`tokentrace.catalog.functions`), declared in the bundled modules (``tokentrace.queries.*``)
or in the file itself. The catalogue reads everything from that one declaration: the purpose
(the first paragraph of the function's comment), the parameters (its arguments, their comments,
the call's literals as defaults, a ``>= N`` in an argument's comment as its lower bound) and the
columns (``RETURNS TABLE``; with ``rank``, the rank identity the runner adds after it:
:mod:`tokentrace.catalog.identity`). A ``DURATION`` argument ``x_ns`` is the parameter ``x_us``:
people give and read µs, the SQL receives integer ns. A cross-rank query's columns are its reduce's,
declared by the reduce's first statement, ``CREATE TEMP TABLE <query>_result(...)``
(:mod:`tokentrace.catalog.reduce`).

A query without such a call (any plain SELECT) runs as it is: no parameters, its purpose the
first paragraph of its leading comment.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

from tokentrace.catalog.functions import (
    Call,
    Field,
    Function,
    find_call,
    find_function,
    result_table,
)
from tokentrace.catalog.identity import with_identity_fields
from tokentrace.catalog.params import Param, param_from_arg
from tokentrace.catalog.reduce import REDUCE_MARKER, split_sql
from tokentrace.errors import QueryError

SQL_PACKAGE = "tokentrace"
# The old header of query files (@param / @column lines, ${name}), refused with the new way
_LEGACY = re.compile(r"^--\s*@(?:param|column)\b|\$\{\w+\}", re.M)
# The reduce's old declaration, a comment nothing checked: refused with the new way
_LEGACY_REDUCE = re.compile(r"^--\s*RETURNS\s+TABLE\s*\(", re.M | re.I)
_PLACEHOLDER = re.compile(r"\$\{(\w+)\}")
_UNIT_TYPES = {"DURATION": "ns", "TIMESTAMP": "ns"}


@dataclass(frozen=True)
class Column:
    """An output column as declared: name, PerfettoSQL type (``LONG``, ``DURATION``,
    ``TIMESTAMP``, ``DOUBLE``, ``STRING``, ``BOOL``...), doc."""

    name: str
    type: str
    doc: str

    @property
    def unit(self) -> str:
        """``ns`` for a ``DURATION`` or ``TIMESTAMP`` column, else ``""``."""
        return _UNIT_TYPES.get(self.type, "")


@dataclass(frozen=True)
class QuerySpec:
    """A runnable query: where it is, what it answers, what it takes and returns."""

    name: str
    path: Path
    purpose: str
    params: tuple[Param, ...] = ()
    columns: tuple[Column, ...] = ()
    sql: str = field(default="", repr=False)
    call: Call | None = field(default=None, repr=False)
    # The call's function when a bundled module declares it: run inline (functions.inline_call)
    function: Function | None = field(default=None, repr=False)

    @property
    def is_cross_rank(self) -> bool:
        """True for a query in two parts, a per-rank map and a cross-rank reduce
        (:mod:`tokentrace.catalog.reduce`)."""
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
    """PerfettoSQL modules of package ``tokentrace``: ``{"tokentrace.ranks": sql, ...}``, read
    again when a file changed (every query reads the signatures in them)."""
    root = bundled_dir() / SQL_PACKAGE
    return dict(_read_modules(root, _stamp(root)))


def _stamp(root: Path) -> tuple:
    """The module files under ``root`` with their change time and size."""
    return tuple((path, *_mtime_size(path)) for path in sorted(root.rglob("*.sql")))


def _mtime_size(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_mtime_ns, status.st_size


@functools.lru_cache(maxsize=4)
def _read_modules(root: Path, stamp: tuple) -> tuple[tuple[str, str], ...]:
    return tuple((f"{SQL_PACKAGE}." + ".".join(path.relative_to(root).with_suffix("").parts),
                  path.read_text(encoding="utf-8")) for path, *_ in stamp)


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
    """Reads a ``.sql`` file and the declaration of the function it calls (a bundled query is
    read again only when it or a module changed).

    Raises:
        QueryError: the file cannot be read, still has the old ``-- @param`` header, or calls
            a function that is not declared as a table function (or declared wrongly).
    """
    try:
        file_stamp = _mtime_size(path)
    except OSError as exc:
        raise QueryError(f"{path}: cannot read the query ({exc})") from None
    modules_stamp = _stamp(bundled_dir() / SQL_PACKAGE)
    if path.resolve().parent != bundled_dir().resolve():  # a file of one's own: always read
        return _load_spec.__wrapped__(path, file_stamp, modules_stamp)
    return _load_spec(path, file_stamp, modules_stamp)


def _legacy_error(path: Path, sql: str) -> str:
    """One line naming the first ``${name}`` placeholder (and its line), else the first
    ``-- @param`` header, of a query written the old way, and the way now."""
    placeholder = _PLACEHOLDER.search(sql)
    found = placeholder or re.search(r"^--\s*@(?:param|column)\b", sql, re.M)
    line = sql.count("\n", 0, found.start()) + 1
    if placeholder is not None:
        name = placeholder.group(1)
        what, how = f"undeclared placeholder ${{{name}}} (line {line})", f"f({name} ...)"
    else:
        what, how = f"'{found.group().strip()}' header (line {line})", "f(args)"
    return (f"{path}: {what}: '-- @param' headers and '${{name}}' placeholders are gone: "
            f"declare a CREATE PERFETTO FUNCTION {how} RETURNS TABLE(...) and end the file "
            "with SELECT * FROM f(defaults) (see docs/queries.md)")


@functools.lru_cache(maxsize=64)
def _load_spec(path: Path, file_stamp: tuple[int, int], modules_stamp: tuple) -> QuerySpec:
    try:
        sql = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise QueryError(f"{path}: cannot read the query ({exc})") from None
    if _LEGACY.search(sql):
        raise QueryError(_legacy_error(path, sql))
    map_sql, reduce_sql = split_sql(sql)
    call = find_call(map_sql)
    sources = [sql, *module_sources().values()]
    own = find_function(call.function, [sql], str(path)) if call else None
    function = own or (find_function(call.function, sources[1:], str(path)) if call else None)
    reduced = _reduce_columns(path, sql, reduce_sql) if reduce_sql else None
    if function is None:  # a plain query, or one ending in a call of the engine's own function
        return QuerySpec(path.stem, path, _file_purpose(sql), (),
                         _columns(reduced or (), sources, path), sql)
    if call.args is None:
        raise QueryError(f"{path}: the arguments of {function.name}(...) must be literals "
                         "(numbers, 'strings', TRUE, FALSE) or constant-function calls")
    if len(call.args) != len(function.args):
        raise QueryError(f"{path}: {function.name} takes {len(function.args)} arguments, the "
                         f"call gives {len(call.args)}")
    params = [param_from_arg(arg, text, sources, f"{path}: {function.name}")
              for arg, text in zip(function.args, call.args)]
    _check_unique(params, path)
    columns = _columns(function.columns if reduced is None else reduced, sources, path)
    return QuerySpec(path.stem, path, _first_paragraph(function.doc), tuple(params), columns,
                     sql, call, None if own else function)


def _columns(declared: tuple[Field, ...], sources: list[str], path: Path) -> tuple[Column, ...]:
    """The declared columns as the result has them: the rank identity after ``rank``."""
    declared = with_identity_fields(declared, sources[1:], str(path))
    return tuple(Column(c.name, c.type, c.doc) for c in declared)


def _reduce_columns(path: Path, sql: str, reduce_sql: str) -> tuple[Field, ...]:
    """The columns a cross-rank query's reduce declares (:mod:`tokentrace.catalog.reduce`).

    Raises:
        QueryError: the reduce does not start with its ``CREATE TEMP TABLE`` declaration.
    """
    table = result_table(reduce_sql, str(path))
    if table is not None:
        return table.columns
    old = _LEGACY_REDUCE.search(sql)
    what = (f"its columns in a '-- RETURNS TABLE(' comment (line "
            f"{sql.count(chr(10), 0, old.start()) + 1})" if old else "no declared columns")
    raise QueryError(f"{path}: the reduce has {what}: start it with CREATE TEMP TABLE "
                     f"{path.stem}_result(columns); and then its SELECT, which must return "
                     "those columns (see docs/queries.md)")


def _file_purpose(sql: str) -> str:
    """The first paragraph of the file's leading comment, without a ``name:`` prefix."""
    lines = []
    for line in sql.splitlines():
        stripped = line.strip()
        if not stripped.startswith("--"):
            break
        lines.append(stripped[2:].strip())
    return _first_paragraph("\n".join(lines)).split(":", 1)[-1].strip()


def _first_paragraph(doc: str) -> str:
    """The lines of ``doc`` up to its first blank line, joined."""
    lines = []
    for line in doc.splitlines():
        if not line.strip():
            break
        lines.append(line.strip())
    return " ".join(lines)


def _check_unique(params: list[Param], path: Path) -> None:
    """Refuses two parameters with one name (``x_us`` from ``x_ns`` beside an ``x_us``)."""
    seen: set[str] = set()
    for param in params:
        if {param.name, param.sql_name} & seen:
            raise QueryError(f"{path}: parameter {param.name} clashes with another argument")
        seen |= {param.name, param.sql_name}


__all__ = ["Column", "Field", "QuerySpec", "SQL_PACKAGE", "bundled_dir", "find_query",
           "list_queries", "load_spec", "module_sources"]
