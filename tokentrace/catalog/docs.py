"""The Markdown table of the bundled queries, generated from their typed functions.

The table sits in ``docs/stall-queries.md`` between the lines ``<!-- queries:begin ... -->`` and
``<!-- queries:end -->``; ``tests/sql/test_docs_table.py`` fails when it differs from what the
functions declare. After changing a query's function (its comment, arguments, columns) or the
defaults its runnable file passes::

    python -m tokentrace.catalog.docs docs/stall-queries.md          # rewrite the table
    python -m tokentrace.catalog.docs --check docs/stall-queries.md  # exit 1 if it is stale
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tokentrace.catalog.headers import QuerySpec, list_queries
from tokentrace.catalog.identity import RANK_IDENTITY
from tokentrace.catalog.params import Param, display

BEGIN = ("<!-- queries:begin: generated from the queries' functions by "
         "`python -m tokentrace.catalog.docs docs/stall-queries.md`; do not edit by hand -->")
END = "<!-- queries:end -->"
_SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)\.\s+(?=[A-Z0-9`])")


def markdown_table(specs: list[QuerySpec] | None = None) -> str:
    """The table of ``specs`` (default: every bundled query) as Markdown, one row per query.

    Columns: the query's name, what it answers (its function's first paragraph), its output
    columns (count and names; the rank identity ``rank, dp, pp, cp, tp, dcp, ep, stage``
    abbreviated), and its parameters with type, unit, default, lower bound and the first sentence
    of their doc.
    """
    specs = list_queries() if specs is None else specs
    lines = ["| query | answers | columns | parameters |", "|---|---|---|---|"]
    for spec in specs:
        cells = (f"`{spec.name}`", spec.purpose, _columns_cell(spec), _params_cell(spec))
        lines.append("| " + " | ".join(_escape(cell) for cell in cells) + " |")
    lines.append("")
    lines.append(f"*rank columns*: `{', '.join(RANK_IDENTITY)}`, added to every per-rank table "
                 "from `tt_ranks`. Durations `*_us` are given in µs (or with a unit: `500ns`, "
                 "`2ms`, `1s`); the SQL receives them as integer ns in the `DURATION` argument "
                 "`*_ns`. Every column's type and meaning: the query's function in "
                 "`queries/tokentrace/queries/` (`tokentrace queries` prints purpose and "
                 "parameters).")
    return "\n".join(lines)


def _columns_cell(spec: QuerySpec) -> str:
    names = [c.name for c in spec.columns]
    if not names:
        return "-"
    rank = tuple(names[:len(RANK_IDENTITY)]) == RANK_IDENTITY
    rest = names[len(RANK_IDENTITY):] if rank else names
    listed = f"`{', '.join(rest)}`" if rest else ""
    prefix = "*rank columns*" + (", " if listed else "") if rank else ""
    return f"{len(names)}: {prefix}{listed}"


def _params_cell(spec: QuerySpec) -> str:
    return "<br>".join(_param_text(p) for p in spec.params) or "none"


def _param_text(param: Param) -> str:
    details = [param.type] + ([param.unit] if param.unit else [])
    details.append("required" if param.default is None else f"default `{display(param.default)}`")
    if param.minimum is not None:
        details.append(f">= {param.minimum}")
    doc = _first_sentence(param.doc)
    return f"`{param.name}` ({', '.join(details)})" + (f": {doc}" if doc else "")


def _first_sentence(text: str) -> str:
    parts = _SENTENCE_END.split(text, maxsplit=1)
    return parts[0] + "." if len(parts) > 1 else text


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


def replace_table(text: str, table: str) -> str:
    """``text`` with the lines between the begin and end markers replaced by ``table``.

    Raises:
        ValueError: the markers are missing or out of order.
    """
    lines = text.split("\n")
    begin = next((i for i, line in enumerate(lines) if line.startswith("<!-- queries:begin")), None)
    end = next((i for i, line in enumerate(lines) if line.strip() == END), None)
    if begin is None or end is None or end < begin:
        raise ValueError(f"no '<!-- queries:begin ... -->' ... '{END}' lines in the text")
    return "\n".join([*lines[:begin], BEGIN, table, *lines[end:]])


def current_table(text: str) -> str | None:
    """What ``text`` holds between the markers (None without markers)."""
    lines = text.split("\n")
    begin = next((i for i, line in enumerate(lines) if line.startswith("<!-- queries:begin")), None)
    end = next((i for i, line in enumerate(lines) if line.strip() == END), None)
    if begin is None or end is None or end < begin:
        return None
    return "\n".join(lines[begin + 1:end])


def main(argv: list[str]) -> int:
    """``[--check] FILE...``: rewrites each file's table, or with ``--check`` returns 1 when one
    is stale (and names it)."""
    check = "--check" in argv
    paths = [Path(arg) for arg in argv if arg != "--check"]
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    table, stale = markdown_table(), []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        try:
            updated = replace_table(text, table)
        except ValueError as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            return 2
        if updated == text:
            continue
        stale.append(path)
        if not check:
            path.write_text(updated, encoding="utf-8")
    for path in stale:
        print(f"{path}: query table {'is stale' if check else 'rewritten'}", file=sys.stderr)
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
