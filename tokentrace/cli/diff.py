"""``tokentrace diff``: parse options, call :func:`tokentrace.diff.diff` and
:func:`tokentrace.diff.write_diff`, print the verdict; exit 3 on a regression when asked."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from tokentrace.cli.app import app, echo_err, user_errors
from tokentrace.cli.options import Address, Engine, Quiet, Shell, Wasm, engine_options
from tokentrace.options import AnalyzeOptions, MergeOptions
from tokentrace.runtime.cores import usable_cores

# The exit status of a run that fails --fail-on-regression (1 stays for errors).
REGRESSION_EXIT = 3


@app.command()
def diff(
    before: Path = typer.Argument(..., help="The run before: a profile folder, a merged or torch-profiler trace, or a tokentrace analyze output folder (its tables are reused). Nothing is written into it: merges go to the user cache (tokentrace cache list)."),
    after: Path = typer.Argument(..., help="The run after, as BEFORE."),
    output: Path = typer.Option(..., "-o", "--output", help="Folder for diff.html and tables/*.parquet."),
    fail_on_regression: Optional[float] = typer.Option(None, "--fail-on-regression", min=0, metavar="PCT", help="Exit 3 when a rank's step time p50 grew by more than PCT % (the same step on both sides), its GPU idle share grew by more than PCT percentage points, or a new stall cause costs more than PCT % of its active time."),
    step_name: Optional[str] = typer.Option(None, "--step-name", help="Slice name of one scheduler step for runs whose tables are computed here; '' finds it (default: the step_breakdown.sql header's)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="Ranks merged and queried at once (default: the cores this process may use)."),
    quiet: Quiet = False,
    engine: Engine = "embedded",
    wasm: Wasm = None,
    shell: Shell = None,
    address: Address = None,
) -> None:
    """Compare two runs rank by rank: what each ran on, step time, GPU idle, its causes, kernels; diff.html and a verdict."""
    options = AnalyzeOptions(merge=MergeOptions(jobs=jobs or usable_cores()), jobs=jobs,
                             engine=engine_options(engine, wasm, shell, address), step_name=step_name)
    from tokentrace.cli.progress import StageLines, compile_note
    from tokentrace.runtime.command import command

    with command() as written, user_errors():
        _check_output(output, options)
        written.track(output / "diff.html")
        written.track_tree(output / "tables")
        from tokentrace.diff import diff as diff_runs
        from tokentrace.diff import write_diff

        with StageLines(quiet) as lines:  # merges go to the user cache, shared with analyze
            compile_note(lines, options.engine)
            result = diff_runs(before, after, options, progress=lines)
            lines.stage("writing tables and diff.html")
            paths = write_diff(result, output)
    for line in result.verdict + [f"note: {n}" for n in result.notes]:
        print(line)
    print(f"diff: {paths['diff.html']}")
    if fail_on_regression is not None:
        found = result.regressions(fail_on_regression)
        for line in found:
            echo_err(f"regression: {line}")
        if found:
            raise typer.Exit(REGRESSION_EXIT)


def _check_output(output: Path, options: AnalyzeOptions) -> None:
    """The engine options and the output layout checked before any work."""
    from tokentrace.cli.options import check_engine_options
    from tokentrace.errors import InputError

    check_engine_options(options.engine)
    if output.exists() and not output.is_dir():
        raise InputError(f"{output}: is a file; -o names the output folder: choose another")
    for name, folder in (("tables", True), ("diff.html", False)):
        path = output / name
        if path.exists() and path.is_dir() != folder:
            raise InputError(f"{path}: is a {'file' if folder else 'folder'}, but diff writes a "
                             f"{'folder' if folder else 'file'} there; move it away or choose another -o")
