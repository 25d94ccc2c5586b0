"""Process machinery has one home, tokentrace/runtime/: no other module imports ``signal``,
``multiprocessing`` or ``concurrent.futures``, forks, ends or signals a process, or freezes or
pauses the cyclic collector. (import-linter checks the imports too; the calls only show here.)"""

from __future__ import annotations

import ast
from pathlib import Path

import tokentrace

PACKAGE = Path(tokentrace.__file__).parent
RUNTIME = PACKAGE / "runtime"
MODULES = ("signal", "multiprocessing", "concurrent")
CALLS = {"os": {"fork", "forkpty", "_exit", "kill", "killpg"},
         "gc": {"freeze", "unfreeze", "disable", "enable"}}


def _found(path: Path) -> list[str]:
    """What ``path`` does that only the runtime may: ``line: what``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.attr in CALLS.get(node.value.id, ()):
                found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
            continue
        else:
            continue
        for name in names:
            top, _, rest = name.partition(".")
            if top in MODULES or rest in CALLS.get(top, ()):
                found.append(f"{node.lineno}: import {name}")
    return found


def test_no_module_outside_the_runtime_handles_processes():
    offenders = {str(path.relative_to(PACKAGE)): found for path in sorted(PACKAGE.rglob("*.py"))
                 if RUNTIME not in path.parents and (found := _found(path))}
    assert offenders == {}


def test_the_check_sees_the_runtime_do_it():
    assert any("os.fork" in line for line in _found(RUNTIME / "processes.py"))
    assert any("gc.freeze" in line for line in _found(RUNTIME / "processes.py"))
    assert any("import signal" in line for line in _found(RUNTIME / "signals.py"))
    assert any("os._exit" in line for line in _found(RUNTIME / "command.py"))
