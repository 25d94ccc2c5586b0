"""``tokentrace analyze``: parse options, call :func:`tokentrace.report.analyze`, print a summary."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from tokentrace.cli.app import app, user_errors
from tokentrace.clock import AlignMode


@app.command()
def analyze(
    folder: Path = typer.Argument(..., help="Profile folder: one VizTracer + Proton pair per rank."),
    output: Path = typer.Option(..., "-o", "--output", help="Folder for report.html, tables/*.parquet, plots/*.png, merged/."),
    min_gap_us: float = typer.Option(100, "--min-gap-us", help="Shortest GPU idle interval reported as a gap (µs)."),
    launch_overhead_us: float = typer.Option(10, "--launch-overhead-us", help="Gaps up to this long after an early launch are launch overhead (µs)."),
    stall_min_us: float = typer.Option(2000, "--stall-min-us", help="Steady host-caused gaps at least this long are stalls (µs); shorter ones are per-step host overhead."),
    step_name: str = typer.Option("decode_step", "--step-name", help="Slice name of one scheduler step: a Proton scope or a host frame (function) name."),
    align: AlignMode = typer.Option(AlignMode.AUTO, "--align", help="auto: anchors, else estimated; anchors: anchors only; offset: --offset-us."),
    offset_us: Optional[float] = typer.Option(None, "--offset-us", help="µs added to every Proton time (all ranks)."),
    profile_id: Optional[str] = typer.Option(None, "--profile-id", help="Profile id to take from a folder holding several."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Ranks merged in parallel (processes)."),
    engine: str = typer.Option("embedded", "--engine", help="embedded (WebAssembly, default), native or remote."),
) -> None:
    """Merge, run every stall query, write Parquet, plots and report.html; name the culprits."""
    with user_errors():
        from tokentrace.report import analyze as analyze_folder

        result = analyze_folder(
            folder, output, min_gap_us=min_gap_us, launch_overhead_us=launch_overhead_us,
            step_name=step_name, stall_min_us=stall_min_us, jobs=jobs, engine=engine, align=align, offset_us=offset_us,
            profile_id=profile_id)
    _print_summary(result)


def _print_summary(result) -> None:
    from rich.console import Console
    from rich.table import Table

    from tokentrace.report_html import cause_sentence

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
