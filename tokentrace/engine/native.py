"""The native backend: a ``trace_processor_shell`` binary through the ``perfetto`` package.

The binary comes from ``--shell``, ``$TOKENTRACE_TP_SHELL`` or ``PATH``; it is never downloaded
(the ``perfetto`` package would fetch one when given no ``bin_path``; offline clusters cannot).
Use it for traces past the 4 GiB WebAssembly memory ceiling.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tokentrace.engine.base import Engine
from tokentrace.errors import EngineError

SHELL_ENV = "TOKENTRACE_TP_SHELL"
SHELL_NAME = "trace_processor_shell"
HOW_TO_GET = (f"pass --shell PATH or set {SHELL_ENV}; prebuilt binaries: "
              "https://perfetto.dev/docs/analysis/trace-processor (Linux: "
              "`curl -LO https://get.perfetto.dev/trace_processor && chmod +x trace_processor`), "
              "or keep the default --engine embedded")


def find_shell(shell_path: str | os.PathLike | None = None) -> Path:
    """The binary to run: the argument, then ``$TOKENTRACE_TP_SHELL``, then PATH.

    Raises:
        EngineError: none found, or the named file is not an executable.
    """
    named = shell_path or os.environ.get(SHELL_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise EngineError(f"{path}: not an executable trace_processor_shell; {HOW_TO_GET}")
        return path
    found = shutil.which(SHELL_NAME) or shutil.which("trace_processor")
    if not found:
        raise EngineError(f"no {SHELL_NAME} found (--shell, ${SHELL_ENV}, PATH); {HOW_TO_GET}")
    return Path(found)


def start_native(trace: Path, shell_path: str | os.PathLike | None = None) -> Engine:
    """Starts the shell as an HTTP subprocess with the bundled SQL package, loads ``trace``."""
    from perfetto.trace_processor.api import SqlPackage, TraceProcessor, TraceProcessorConfig

    from tokentrace.catalog import SQL_PACKAGE, bundled_dir

    shell = find_shell(shell_path)
    config = TraceProcessorConfig(
        bin_path=str(shell),
        add_sql_packages=[SqlPackage(str(bundled_dir() / SQL_PACKAGE), SQL_PACKAGE)])
    try:
        processor = TraceProcessor(trace=str(trace), config=config)
    except Exception as exc:  # PerfettoException, OSError from the subprocess, timeouts
        raise EngineError(f"{shell} could not load {trace}: {_first_line(exc)}") from None
    return Engine(_Client(processor), "native", f"shell {shell}", trace)


class _Client:
    """Adapts a :class:`TraceProcessor` to the engine's client interface."""

    def __init__(self, processor):
        self._processor = processor

    def execute_query(self, sql: str):
        return self._processor._backend.execute_query(sql)

    def close(self) -> None:
        self._processor.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
