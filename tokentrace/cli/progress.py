"""What a long command shows while it works: one line per stage (merging rank k/n, loading,
queries, writing) on standard error.

* On a terminal: rich lines, each stage with a spinner, its ranks done (``k/n``) and its time;
  a stage done stays as one line.
* Otherwise (a pipe, a log file, CI): one plain line per stage as it ends,
  ``tokentrace: <stage> (<n> ranks): <seconds> s``, nothing per rank. A stage that fails prints
  no line: a failed command's standard error stays its one ``error:`` line when it fails in its
  first stage (where the checks are).
* With ``--quiet``: nothing.

The first use of the embedded engine on a machine compiles it (seconds); :func:`compile_note`
says so once, before the work, when no compiled module is in the user cache.
"""

from __future__ import annotations

import sys
import time

from tokentrace.options import EngineOptions

#: The plain lines' prefix.
PREFIX = "tokentrace: "


class StageLines:
    """Receives :func:`tokentrace.report.analyze`'s ``stage``/``advance`` calls (and a merge's
    per-rank ticks through :meth:`advance`) and shows them; a context manager.

    Args:
        quiet: show nothing.
        terminal: draw with rich (default: standard error is a terminal).
    """

    def __init__(self, quiet: bool = False, terminal: bool | None = None) -> None:
        self.quiet = quiet
        self.terminal = sys.stderr.isatty() if terminal is None else terminal
        self._bar = None
        self._task = None
        self._name: str | None = None
        self._total: int | None = None
        self._started = time.perf_counter()
        self._notes: list[str] = []

    def __enter__(self) -> StageLines:
        if self.terminal and not self.quiet:
            from rich.console import Console
            from rich.progress import (
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(SpinnerColumn(finished_text="-"), TextColumn("{task.description}"),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=Console(stderr=True, highlight=False))
            self._bar.__enter__()
        return self

    def stage(self, name: str, total: int | None = None) -> None:
        """A new stage (the previous one is done); ``total``: the ranks it goes through."""
        if self.quiet or name == self._name:
            return
        self._finish()
        self._name, self._total, self._started = name, total, time.perf_counter()
        if self._bar is not None:
            self._task = self._bar.add_task(name, total=total)

    def advance(self, label: str = "") -> None:
        """One rank of the stage done (``label``: its tag, or '' for the combined file)."""
        if self._bar is not None and self._task is not None and label:
            self._bar.advance(self._task)

    def note(self, text: str) -> None:
        """A line of its own (not a stage), shown unless quiet."""
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False)
        else:  # printed with the next stage line: nothing before a failing first stage's error
            self._notes.append(text)

    def _finish(self) -> None:
        """The stage running is done: its rich line completed, or its plain line printed."""
        if self._bar is not None and self._task is not None:
            task = self._bar.tasks[self._task]
            done = task.total if task.total is not None else 1
            self._bar.update(self._task, total=done, completed=done)
        elif self._bar is None and self._name is not None and not self.quiet:
            for text in self._notes:
                print(f"{PREFIX}{text}", file=sys.stderr)
            self._notes = []
            count = f" ({self._total} ranks)" if self._total and self._total > 1 else ""
            seconds = time.perf_counter() - self._started
            print(f"{PREFIX}{self._name}{count}: {seconds:.1f} s", file=sys.stderr, flush=True)
        self._task, self._name = None, None

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self._finish()
        if self._bar is not None:
            self._bar.__exit__(*exc)
            self._bar = None


def engine_compiled(options: EngineOptions) -> bool:
    """Whether the embedded engine's compiled module for ``options`` is in the user cache
    (True for other engines, and whenever unsure: only a certain first compile is announced)."""
    if options.backend != "embedded" or options.wasm_build == "memory64":
        return True
    try:
        from tokentrace.engine import wasm_module

        wasm = wasm_module.find_wasm(options.wasm_path)
        tuning = wasm_module.engine_tuning(wasm_module.declares_memory64(wasm), options.stoppable)
        key = wasm_module._cache_key(wasm, tuning)
        return (wasm_module.cache_dir() / f"{wasm.stem}-{key}.cwasm").is_file()
    except Exception:  # noqa: BLE001 - a note only: the engine itself says what is wrong
        return True


def compile_note(lines: StageLines, options: EngineOptions) -> None:
    """Says, once, that this first run compiles the engine (when it does)."""
    if not lines.quiet and not engine_compiled(options):
        lines.note("first run on this machine: compiling the trace processor engine (about 10 s, "
                   "once; later runs reuse it)")
