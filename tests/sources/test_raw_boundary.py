"""Nothing outside ``tokentrace.sources`` reaches into the raw-byte path: the rest of the package
(and the tests of other packages) import only what ``tokentrace.sources._raw`` exports, its three
calls and their results. (The import-linter contract in pyproject.toml checks the package too;
this also covers names taken from the package itself and the tests.)"""

from __future__ import annotations

import ast
from pathlib import Path

import tokentrace.sources._raw as raw

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "tokentrace.sources._raw"
# Where the internals may be imported: the sources package and its tests.
INSIDE = (ROOT / "tokentrace" / "sources", ROOT / "tests" / "sources")


def _violations(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith(PACKAGE)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith(PACKAGE + "."):
                found.append(node.module)
            elif node.module == PACKAGE:
                found += [f"{PACKAGE}.{a.name}" for a in node.names if a.name not in raw.__all__]
            elif node.module == "tokentrace.sources":
                found += [f"{PACKAGE} (as a module)" for a in node.names if a.name == "_raw"]
    return [f"{path.relative_to(ROOT)}: {name}" for name in found]


def test_only_the_exported_calls_are_imported_from_outside():
    files = [p for folder in ("tokentrace", "tests") for p in (ROOT / folder).rglob("*.py")
             if not any(p.is_relative_to(inside) for inside in INSIDE)]
    assert len(files) > 100
    assert [v for path in files for v in _violations(path)] == []


def test_the_package_exports_three_calls_and_their_results():
    calls = {name for name in raw.__all__ if callable(getattr(raw, name)) and not isinstance(getattr(raw, name), type)}
    assert calls == {"index_report", "copy_events", "find_link_starts"}
    assert set(raw.__all__) - calls == {"VizInfo", "LinkStarts", "LinkPlace"}
