"""``tokentrace analyze``: parse options, call :func:`tokentrace.report.analyze`, print a summary.

The query options default to None: the queries hold the defaults, and ``--help`` shows them
(read when the help is shown, see :class:`_HeaderDefaultsCommand`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperCommand

from tokentrace.cli.app import app, user_errors
from tokentrace.cli.options import (
    Address,
    Align,
    Engine,
    OffsetUs,
    ProfileId,
    Quiet,
    Shell,
    Wasm,
    engine_options,
)
from tokentrace.options import AlignMode, AnalyzeOptions, MergeOptions
from tokentrace.runtime.cores import usable_cores
from tokentrace.units import format_ms

# Each query option's default: the bundled query whose call passes it (all report queries
# that take the parameter declare the same default; tests/cli/test_analyze_cli.py checks).
QUERY_DEFAULTS = {"min_gap_us": "gpu_gaps", "launch_overhead_us": "gpu_gaps",
                   "stall_min_us": "rank_summary", "step_name": "step_breakdown"}


def query_default(option: str) -> str:
    """``100 µs, from gpu_gaps.sql``: an option's default as its query passes it."""
    from tokentrace.catalog import find_query
    from tokentrace.catalog.params import display

    query = QUERY_DEFAULTS[option]
    param = find_query(query).param(option)
    unit = f" {param.unit}" if param.unit else ""
    return f"{display(param.default)}{unit}, from {query}.sql"


class _HeaderDefaultsCommand(TyperCommand):
    """Fills ``{default}`` in the query options' help from the queries when the help is
    formatted, not at import: reading them imports the catalogue (the engine and pandas, a
    quarter second), which ``tokentrace merge`` and every other command would pay for."""

    def format_help(self, ctx, formatter) -> None:
        for param in self.params:
            if param.name in QUERY_DEFAULTS and "{default}" in (param.help or ""):
                param.help = param.help.replace("{default}", query_default(param.name))
        super().format_help(ctx, formatter)


@app.command(cls=_HeaderDefaultsCommand)
def analyze(
    folder: Path = typer.Argument(..., help="Profile folder: per rank one Proton or torch-profiler trace, with its VizTracer report; or one trace file: merged by tokentrace merge (queried as it is), or a torch-profiler trace (merged first). Nothing is written into it: merges go to the user cache (tokentrace cache list)."),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Folder for report.html, tables/*.parquet, plots/*.svg and annotated/*.annotated.json (the traces with the GPU gaps and causes drawn in); required unless --plan."),
    min_gap_us: Optional[float] = typer.Option(None, "--min-gap-us", help="Shortest GPU idle interval reported as a gap, µs (default: {default})."),
    launch_overhead_us: Optional[float] = typer.Option(None, "--launch-overhead-us", help="Gaps up to this long after an early launch are launch overhead, µs (default: {default})."),
    stall_min_us: Optional[float] = typer.Option(None, "--stall-min-us", help="Steady host-caused gaps at least this long are stalls, µs; shorter ones are per-step host overhead (default: {default})."),
    step_name: Optional[str] = typer.Option(None, "--step-name", help="Slice name of one scheduler step: a Proton scope or a host frame (function) name; '' finds it (decode_step, else the host frame run once per launch) (default: {default})."),
    align: Align = AlignMode.AUTO,
    offset_us: OffsetUs = None,
    profile_id: ProfileId = None,
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, help="Ranks merged and queried at once (processes, each holding one rank's trace; with twice as many jobs as ranks, two processes share each rank's queries); default: the cores this process may use (affinity, cgroup quota)."),
    executor: str = typer.Option("local", "--executor", help="Where the per-rank queries run: local (processes), dask (a local Dask cluster) or dask://HOST:PORT (a running scheduler; its workers must see the same paths)."),
    no_plots: bool = typer.Option(False, "--no-plots", help="Draw no figure (plots/*.svg): the tables, the report's text and the warnings only, for scripts and CI."),
    plan: bool = typer.Option(False, "--plan", help="Print how the run would go (the merge or the cached one, engines per rank, processes) and exit: nothing merged, loaded or written."),
    quiet: Quiet = False,
    engine: Engine = "embedded",
    wasm: Wasm = None,
    shell: Shell = None,
    address: Address = None,
) -> None:
    """Merge, run every stall query, write Parquet, plots, report.html and the annotated traces; name the culprits."""
    options = AnalyzeOptions(
        merge=MergeOptions(align=align, offset_us=offset_us, profile_id=profile_id,
                           jobs=jobs or usable_cores()),
        engine=engine_options(engine, wasm, shell, address), jobs=jobs, executor=executor,
        min_gap_us=min_gap_us,
        launch_overhead_us=launch_overhead_us, stall_min_us=stall_min_us, step_name=step_name,
        plots=not no_plots)
    from tokentrace.cli.progress import StageLines, compile_note
    from tokentrace.runtime.command import command

    if plan:
        _print_plan(folder, options)
        return
    with command() as written, user_errors():
        out = output_folder(output)
        profile = check_before_work(folder, out, options, written)
        from tokentrace.report import analyze as analyze_folder

        with StageLines(quiet) as lines:
            compile_note(lines, options.engine)
            result = analyze_folder(profile or folder, out, options, progress=lines)
    _print_summary(result)


def _print_plan(folder: Path, options: AnalyzeOptions) -> None:
    """``--plan``: the run's plan, a line per choice (:func:`tokentrace.report.analyze_plan`)."""
    from tokentrace.cli.options import check_engine_options
    from tokentrace.errors import InputError
    from tokentrace.merge.pipeline import check_options
    from tokentrace.runtime.command import command

    with command(), user_errors():
        check_options(options.merge)
        check_engine_options(options.engine)
        if not folder.is_dir():
            raise InputError(f"{folder}: --plan plans a profile folder's run (one trace file is "
                             "loaded and queried in this process)")
        from tokentrace.report.pipeline import analyze_plan

        for line in analyze_plan(folder, options).lines():
            print(line)


def output_folder(output: str | None) -> Path:
    """The -o value as a folder; a missing or empty one is refused (as a path it would be the
    current folder, filled with report.html, tables/, plots/ and annotated/ unasked).

    Raises:
        InputError: ``output`` is missing, empty or blank.
    """
    from tokentrace.errors import InputError

    if output is None:
        raise InputError("-o is missing: name the output folder (e.g. -o out/run1), or pass "
                         "--plan to see how the run would go")
    if not output.strip():
        raise InputError("-o is empty: name the output folder (e.g. -o out/run1; -o . writes "
                         "into the current folder)")
    return Path(output)


# What analyze writes in its output folder: files, and folders of files (put back as they were
# when the command fails). The merge goes to the user cache, not here (tokentrace.merge.cache).
_OUTPUT_FILES = ("report.html",)
_OUTPUT_FOLDERS = ("tables", "plots", "annotated")
_REPLACED_FOLDERS = _OUTPUT_FOLDERS


def check_before_work(folder: Path, output: Path, options: AnalyzeOptions, written=None):
    """Every option, the output layout and the inputs checked before the merge starts; with a
    journal (``written``), the report, tables and plots are put back as they were on failure.
    Returns the profile found in ``folder`` (:class:`~tokentrace.sources.profile.Profile`,
    merged as found), or None for one trace file.

    Raises:
        InputError: naming the option or path and what to do.
    """
    from tokentrace.cli.options import check_engine_options, check_finite
    from tokentrace.errors import InputError
    from tokentrace.merge import find_profile
    from tokentrace.merge.pipeline import check_options
    from tokentrace.runtime.files import refuse_inputs

    for flag, value in (("--min-gap-us", options.min_gap_us), ("--stall-min-us", options.stall_min_us),
                        ("--launch-overhead-us", options.launch_overhead_us)):
        check_finite(flag, value)
    check_options(options.merge)
    check_engine_options(options.engine)
    if not folder.exists():
        raise InputError(f"{folder}: no such profile folder; check the path")
    if output.exists() and not output.is_dir():
        raise InputError(f"{output}: is a file; -o names the output folder: choose another")
    for name in _OUTPUT_FOLDERS:
        if (output / name).exists() and not (output / name).is_dir():
            raise InputError(f"{output / name}: is a file, but analyze writes a folder there; "
                             "move it away or choose another -o")
    for name in _OUTPUT_FILES:
        if (output / name).is_dir():
            raise InputError(f"{output / name}: is a folder, but analyze writes its report "
                             "there; move it away or choose another -o")
    profile = None
    if folder.is_dir():
        profile = find_profile(folder, options.merge.profile_id)
        inputs = list(profile.inputs)
    else:  # one trace: merged (tokentrace merge) or raw (a torch-profiler trace), see report
        from tokentrace.sources.detect import TraceKind, not_analyzable_message, sniff

        given = [flag for flag, value in (("--offset-us", options.merge.offset_us),
                                          ("--profile-id", options.merge.profile_id)) if value is not None]
        kind = sniff(folder)
        if kind not in (TraceKind.MERGED, TraceKind.KINETO):
            raise InputError(not_analyzable_message(folder, kind))
        merged = kind is TraceKind.MERGED
        if merged and (given or options.merge.align != MergeOptions().align):
            raise InputError(f"{folder}: is a merged trace, queried as it is; "
                             f"{', '.join(given) or '--align'} applies to a profile folder's "
                             "merge: pass the folder, or leave the option out")
        inputs = [folder]
    targets = [output / name for name in _OUTPUT_FILES]
    targets += [p for name in _REPLACED_FOLDERS if (output / name).is_dir() for p in (output / name).iterdir()]
    refuse_inputs(targets, inputs)
    if written is not None:
        for name in _OUTPUT_FILES:
            written.track(output / name)
        for name in _REPLACED_FOLDERS:
            written.track_tree(output / name)
    return profile


def _print_summary(result) -> None:
    from rich.console import Console
    from rich.table import Table

    from tokentrace.report.html import categories_line, cause_label, cause_sentence

    console = Console(highlight=False)
    table = Table(title="GPU idle per rank (ms)", title_justify="left")
    for column in ("rank", "GPU idle", "share", "host-caused", "top stall cause", "it explains",
                   "per step"):
        table.add_column(column, justify="left" if column.startswith(("rank", "top")) else "right")
    for _, row in result.summary.iterrows():
        table.add_row(row["rank"], format_ms(row["idle_ns"]), f"{row['idle_share']:.1%}",
                      format_ms(row.get("host_caused_ns")), cause_label(row) or "-",
                      format_ms(row["top_idle_ns"]), format_ms(row["top_idle_per_step_ns"]))
    console.print(table)
    for _, row in result.summary.iterrows():
        console.print(cause_sentence(row), markup=False, soft_wrap=True)
    legend = categories_line(result.summary)
    if legend:
        console.print(legend, markup=False, soft_wrap=True)
    if result.health:
        console.print(f"trace health: {result.health}", markup=False, soft_wrap=True)
    seconds = ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items())
    console.print(f"report: {result.report}  ({seconds})", markup=False, soft_wrap=True)
    if result.annotated:
        console.print(annotated_line(result.annotated, result.output), markup=False, soft_wrap=True)


def annotated_line(paths: list[Path], output: Path) -> str:
    """``annotated traces: OUT/annotated/a.annotated.json, ... (any Perfetto UI; tokentrace
    view ...)``: where the timeline with the gaps and causes drawn in is, and how to open it."""
    shown = ", ".join(str(p) for p in paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
    how = f"tokentrace view {output}" if len(paths) == 1 else f"tokentrace view {paths[0]}"
    return (f"annotated traces (GPU gaps and their causes drawn in; open in any Perfetto UI, or "
            f"{how}): {shown}")
