"""``tokentrace analyze``: parse options, call :func:`tokentrace.report.analyze`, print a summary."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from tokentrace.cli.app import app, user_errors
from tokentrace.cli.options import (
    Address,
    Align,
    Engine,
    Jobs,
    OffsetUs,
    ProfileId,
    Shell,
    Wasm,
    engine_options,
)
from tokentrace.options import AlignMode, AnalyzeOptions, MergeOptions


@app.command()
def analyze(
    folder: Path = typer.Argument(..., help="Profile folder: one VizTracer + Proton pair per rank."),
    output: Path = typer.Option(..., "-o", "--output", help="Folder for report.html, tables/*.parquet, plots/*.png, merged/."),
    min_gap_us: Optional[float] = typer.Option(None, "--min-gap-us", help="Shortest GPU idle interval reported as a gap (µs; default: gpu_gaps.sql's)."),
    launch_overhead_us: Optional[float] = typer.Option(None, "--launch-overhead-us", help="Gaps up to this long after an early launch are launch overhead (µs; default: gpu_gaps.sql's)."),
    stall_min_us: Optional[float] = typer.Option(None, "--stall-min-us", help="Steady host-caused gaps at least this long are stalls (µs); shorter ones are per-step host overhead."),
    step_name: Optional[str] = typer.Option(None, "--step-name", help="Slice name of one scheduler step: a Proton scope or a host frame (function) name (default: step_breakdown.sql's)."),
    align: Align = AlignMode.AUTO,
    offset_us: OffsetUs = None,
    profile_id: ProfileId = None,
    jobs: Jobs = 1,
    engine: Engine = "embedded",
    wasm: Wasm = None,
    shell: Shell = None,
    address: Address = None,
) -> None:
    """Merge, run every stall query, write Parquet, plots and report.html; name the culprits."""
    options = AnalyzeOptions(
        merge=MergeOptions(align=align, offset_us=offset_us, profile_id=profile_id, jobs=jobs),
        engine=engine_options(engine, wasm, shell, address), min_gap_us=min_gap_us,
        launch_overhead_us=launch_overhead_us, stall_min_us=stall_min_us, step_name=step_name)
    with user_errors():
        from tokentrace.report import analyze as analyze_folder

        result = analyze_folder(folder, output, options)
    _print_summary(result)


def _print_summary(result) -> None:
    from rich.console import Console
    from rich.table import Table

    from tokentrace.report.html import cause_sentence

    console = Console(highlight=False)
    table = Table(title="GPU idle per rank (ms)", title_justify="left")
    for column in ("rank", "GPU idle", "share", "host_late", "top stall cause", "its idle",
                   "per step"):
        table.add_column(column, justify="left" if column.startswith(("rank", "top")) else "right")
    for _, row in result.summary.iterrows():
        table.add_row(row["rank"], _ms(row["idle_ns"]), f"{row['idle_share']:.1%}",
                      _ms(row["idle_host_late_ns"]), str(row["top_function"] or "-"),
                      _ms(row["top_idle_ns"]), _ms(row["top_idle_per_step_ns"]))
    console.print(table)
    for _, row in result.summary.iterrows():
        console.print(cause_sentence(row), markup=False, soft_wrap=True)
    seconds = ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items())
    console.print(f"report: {result.report}  ({seconds})", markup=False, soft_wrap=True)


def _ms(value) -> str:
    return "-" if value is None or value != value else f"{value / 1e6:.2f}"
