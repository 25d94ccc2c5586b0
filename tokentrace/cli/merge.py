"""``tokentrace merge``: parse options, call :func:`tokentrace.merge.merge`, print a summary."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from tokentrace.cli.app import app, user_errors
from tokentrace.clock import AlignMode


@app.command()
def merge(
    inputs: list[Path] = typer.Argument(..., help="A profile folder, or VIZ.json PROTON.chrome_trace [more Proton parts]."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Output folder, or file name (.json / .json.gz)."),
    combine: bool = typer.Option(False, "--combine", help="Also write one file with every rank on a common time axis."),
    gzip_output: bool = typer.Option(False, "--gzip", help="Compress the output (implied by a .gz output name)."),
    align: AlignMode = typer.Option(AlignMode.AUTO, "--align", help="auto: anchors, else estimated; anchors: anchors only; offset: --offset-us."),
    offset_us: Optional[float] = typer.Option(None, "--offset-us", help="µs added to every Proton time (all ranks)."),
    profile_id: Optional[str] = typer.Option(None, "--profile-id", help="Profile id to take from a folder holding several."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Ranks merged in parallel (processes)."),
    check_anchors: bool = typer.Option(True, "--check-anchors/--no-check-anchors", help="With anchors, also bound the offset from the traces and warn when the anchors lie outside (0.1-0.3 s per rank)."),
) -> None:
    """Merge each rank's VizTracer and Proton traces onto one Perfetto timeline."""
    from tokentrace import merge as merge_lib

    with user_errors():
        with _progress() as tick:
            result = merge_lib.merge(
                inputs, output, combine=combine, compress=gzip_output, align=align,
                offset_us=offset_us, profile_id=profile_id, jobs=jobs, progress=tick,
                check_anchors=check_anchors,
            )
    for rank in result.ranks:
        print(
            f"{rank.tag}: {rank.n_kernels} kernels, {rank.n_flows} flows, "
            f"offset {rank.alignment.offset_ns / 1e3:.3f} µs ({rank.alignment.method}) -> {rank.output}"
        )
    if result.combined is not None:
        print(f"all ranks -> {result.combined}")


class _progress:
    """A rich progress bar on a terminal (stderr), nothing otherwise; yields a tick callback."""

    def __enter__(self):
        self._bar = None
        if sys.stderr.isatty():
            from rich.progress import Progress

            self._bar = Progress(transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task("merging ranks", total=None)
        return self._tick

    def _tick(self, label: str) -> None:
        if self._bar is not None:
            self._bar.advance(self._task)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
