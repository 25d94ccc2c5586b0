"""PerfettoSQL function signatures as the catalogue reads them: a runnable query's typed
function, the call that runs it, and its arguments' defaults.

A runnable query ends with one call of a table function, its arguments literals::

    INCLUDE PERFETTO MODULE tokentrace.queries.gpu_gaps;
    SELECT * FROM tt_query_gpu_gaps(tt_default_min_gap_ns(), 10000, 10, '');

and the function is declared as the Perfetto standard library declares its own, a comment
before the statement, before each argument and before each column::

    -- When did each rank's GPU sit idle?
    CREATE PERFETTO FUNCTION tt_query_gpu_gaps(
      -- Shortest gap reported (>= 0).
      min_gap_ns DURATION,
      ...
    )
    RETURNS TABLE(
      -- Gap start.
      ts TIMESTAMP,
      ...
    )
    AS
    SELECT ...;

The call's arguments are the defaults; an argument is a literal (number, quoted string, TRUE,
FALSE) or a call of a constant function (``CREATE PERFETTO FUNCTION name() RETURNS ... AS
SELECT literal``), so that a default shared with the modules has one home.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from tokentrace.errors import QueryError

_CREATE = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?PERFETTO\s+FUNCTION\s+(\w+)\s*\(", re.I)
_CALL = re.compile(r"SELECT\s+\*\s+FROM\s+(\w+)\s*\(", re.I)
_RETURNS_TABLE = re.compile(r"\s*RETURNS\s+TABLE\s*\(", re.I)
_CONSTANT_BODY = re.compile(r"\s*\)\s*RETURNS\s+\w+\s+AS\s+SELECT\s+(.+?)\s*;", re.I | re.S)
_BODY = re.compile(r"\s*AS\b", re.I)
_INCLUDE = re.compile(r"^INCLUDE\s+PERFETTO\s+MODULE\s+[\w.]+\s*;", re.M | re.I)
# What an argument reference is, and the comments and quoted text that a body holds whole: in
# them `$name` is text, never an argument (scanned left to right, the first alternative wins)
_ARGUMENT = re.compile(r"--[^\n]*|/\*.*?(?:\*/|\Z)|'(?:[^']|'')*'?|\"(?:[^\"]|\"\")*\"?"
                       r"|`[^`]*`?|\$(\w+)", re.S)
# What decides where a statement or a parenthesis ends: comments and strings are skipped whole
_STRUCTURE = re.compile(r"--[^\n]*|/\*.*?(?:\*/|\Z)|'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|[();]",
                        re.S)
# A cross-rank query's reduce declares its result as its first statement (comments before it;
# each comment taken to its line's end, so that a failed match cannot backtrack through dashes)
_RESULT_TABLE = re.compile(r"\A(?:\s|--[^\n]*\n)*(CREATE\s+(?:TEMP|TEMPORARY)\s+TABLE\s+(\w+)\s*\()",
                           re.I)
_TOKEN = re.compile(r"\s+|--[^\n]*|'(?:[^']|'')*'|[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\b"
                    r"|\w+\s*\(\s*\)|\w+|,")


@dataclass(frozen=True)
class Field:
    """An argument or a column: name, PerfettoSQL type (``LONG``, ``DURATION``...), doc."""

    name: str
    type: str
    doc: str


@dataclass(frozen=True)
class Function:
    """A ``CREATE PERFETTO FUNCTION ... RETURNS TABLE`` declaration."""

    name: str
    doc: str
    args: tuple[Field, ...]
    columns: tuple[Field, ...]
    # The SELECT after AS, its arguments as $name, and the INCLUDE statements of the source
    # that declares it: what a call runs.
    body: str = ""
    includes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Call:
    """The final ``SELECT * FROM name(args)`` of a query: where it starts in the SQL, the
    function's name and the arguments' text (literals or constant-function calls)."""

    start: int
    function: str
    args: tuple[str, ...] | None


def find_call(sql: str) -> Call | None:
    """The call that ends ``sql`` (comments and a ``;`` may follow it), or None. Its ``args``
    is None when they are not all literals or constant-function calls."""
    matches = list(_CALL.finditer(sql))
    if not matches:
        return None
    match = matches[-1]
    end = _closing(sql, match.end() - 1)
    if end is None or _strip_comments(sql[end + 1:]).strip() not in ("", ";"):
        return None
    tokens = _tokens(sql, match.end(), end)
    args: list[list[str]] = [[]]
    for token in tokens or ():
        if token == ",":
            args.append([])
        else:
            args[-1].append(token)
    if tokens is None or (args != [[]] and any(len(arg) != 1 for arg in args)):
        return Call(match.start(), match.group(1), None)
    return Call(match.start(), match.group(1), tuple(arg[0] for arg in args if arg))


def _tokens(sql: str, start: int, end: int) -> list[str] | None:
    """The tokens between ``start`` and ``end``, comments and spaces left out; None when some
    text is no token (an expression)."""
    tokens, position = [], start
    for token in _TOKEN.finditer(sql, start, end):
        if token.start() != position:
            return None
        position = token.end()
        text = token.group()
        if not text.isspace() and not text.startswith("--"):
            tokens.append(text)
    return tokens if position == end else None


def find_function(name: str, sources: list[str], where: str) -> Function | None:
    """The declaration of table function ``name`` in the first of ``sources`` holding it; None
    when none declares it (an engine's own table function, e.g. ``ancestor_slice``).

    Raises:
        QueryError: it is declared but does not return a table.
    """
    for sql in sources:
        match = _declarations(sql).get(name)
        if match is None:
            continue
        args_end = _closing(sql, match.end() - 1)
        returns = _RETURNS_TABLE.match(sql, args_end + 1) if args_end else None
        if returns is None:
            raise QueryError(f"{where}: {name} must be declared RETURNS TABLE(...)")
        columns_end = _closing(sql, returns.end() - 1)
        body = _BODY.match(sql, columns_end + 1)
        return Function(name, _doc_before(sql, match.start()),
                        parse_fields(sql[match.end():args_end], where),
                        parse_fields(sql[returns.end():columns_end], where),
                        sql[body.end():_statement_end(sql, body.end())].strip() if body else "",
                        tuple(_INCLUDE.findall(sql)))
    return None


def table_columns(name: str, sources: list[str], where: str) -> tuple[Field, ...]:
    """The columns ``CREATE PERFETTO TABLE name(...)`` declares in the first of ``sources``
    holding it, each with its comment; ``()`` when none declares it so."""
    declaration = re.compile(rf"CREATE\s+(?:OR\s+REPLACE\s+)?PERFETTO\s+TABLE\s+{re.escape(name)}\s*\(",
                             re.I)
    for sql in sources:
        match = declaration.search(sql)
        end = _closing(sql, match.end() - 1) if match else None
        if end is not None:
            return parse_fields(sql[match.end():end], where)
    return ()


def constant_value(name: str, sources: list[str]) -> str | None:
    """The literal a constant function (no arguments, body ``SELECT literal``) returns, or None
    when no source declares ``name`` so."""
    for sql in sources:
        match = _declarations(sql).get(name)
        if match is not None:
            body = _CONSTANT_BODY.match(sql, match.end())
            return body.group(1) if body else None
    return None


@functools.lru_cache(maxsize=64)
def _declarations(sql: str) -> dict[str, re.Match]:
    """The ``CREATE PERFETTO FUNCTION`` statements of ``sql`` by name (the first of a name):
    the modules are read again for each query, their text is the same."""
    found: dict[str, re.Match] = {}
    for match in _CREATE.finditer(sql):
        found.setdefault(match.group(1), match)
    return found


@dataclass(frozen=True)
class ResultTable:
    """A cross-rank query's reduce's first statement, ``CREATE TEMP TABLE name(columns);``:
    the columns its SELECT must return, in order. ``declaration`` is the statement (SQLite
    runs it), ``select`` the SQL after it."""

    name: str
    columns: tuple[Field, ...]
    declaration: str
    select: str


def result_table(reduce_sql: str, where: str) -> ResultTable | None:
    """The declaration that starts ``reduce_sql``, or None when it starts otherwise.

    Raises:
        QueryError: the declaration's parenthesis or statement is not closed.
    """
    match = _RESULT_TABLE.match(reduce_sql)
    if match is None:
        return None
    columns_end = _closing(reduce_sql, match.end() - 1)
    end = _statement_end(reduce_sql, columns_end) if columns_end is not None else len(reduce_sql)
    if end == len(reduce_sql):
        raise QueryError(f"{where}: CREATE TEMP TABLE {match.group(2)}(...) must end with ';' "
                         "before the reduce's SELECT")
    return ResultTable(match.group(2), parse_fields(reduce_sql[match.end():columns_end], where),
                       reduce_sql[match.start(1):end + 1], reduce_sql[end + 1:])


def parse_fields(text: str, where: str) -> tuple[Field, ...]:
    """``name TYPE`` entries, comma-separated, each after its comment lines (its doc)."""
    fields, doc = [], []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("--"):
            doc.append(stripped[2:].strip())
            continue
        for item in _split_top(stripped):
            parts = item.split(None, 1)
            if len(parts) != 2:
                raise QueryError(f"{where}: expected 'name TYPE' in a signature, got {item!r}")
            fields.append(Field(parts[0], parts[1].strip().upper(), " ".join(doc).strip()))
            doc = []
    return tuple(fields)


def _split_top(line: str) -> list[str]:
    items, depth, current = [], 0, ""
    for char in line:
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += char
    items.append(current.strip())
    return [item for item in items if item]


def inline_call(function: Function, literals: dict[str, str]) -> str:
    """What calling ``function`` with these literals runs, as one statement: its source's
    INCLUDEs, then its body with each argument ``$name`` replaced by its literal (a negative
    number in parentheses). Only an argument the engine would bind is replaced: a ``$name`` in
    a comment (``--``, ``/* */``) or in quoted text (``'...'``, ``"..."``, backquotes)
    stays as written. The engine prepares a function's body when it is created and again at its
    first call; run inline, the body is prepared once, as a query of its own (docs/engine.md,
    "Bundled queries run inline")."""
    return "\n".join([*function.includes, expand_arguments(function.body, literals)])


def expand_arguments(body: str, literals: dict[str, str]) -> str:
    """``body`` with each argument reference ``$name`` outside comments and quoted text
    replaced by ``literals[name]``; a name without a literal stays as written (the engine
    then reports it)."""
    def replace(match: re.Match) -> str:
        name = match.group(1)
        if name is None or name not in literals:
            return match.group(0)
        literal = literals[name]
        return f"({literal})" if literal.startswith("-") else literal

    return _ARGUMENT.sub(replace, body)


def _statement_end(sql: str, start: int) -> int:
    """The index of the ``;`` ending the statement that starts at ``start`` (comments and
    strings skipped), or the end of ``sql``."""
    for token in _STRUCTURE.finditer(sql, start):
        if token.group() == ";":
            return token.start()
    return len(sql)


def _closing(sql: str, open_at: int) -> int | None:
    """The index of the ``)`` matching the ``(`` at ``open_at`` (comments and strings skipped)."""
    depth = 0
    for token in _STRUCTURE.finditer(sql, open_at):
        text = token.group()
        depth += (text == "(") - (text == ")")
        if text == ")" and depth == 0:
            return token.start()
    return None


def _doc_before(sql: str, start: int) -> str:
    """The comment lines right above ``start``, paragraphs separated by blank lines."""
    lines = sql[:start].rstrip("\n").splitlines()
    doc = []
    while lines and lines[-1].lstrip().startswith("--"):
        doc.append(lines.pop().strip()[2:].strip())
    return "\n".join(reversed(doc))


def _strip_comments(sql: str) -> str:
    return re.sub(r"--[^\n]*", "", sql)
