"""``tokentrace merge``: parse options, call :func:`tokentrace.merge.merge`, print a summary."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from tokentrace.cli.app import app, user_errors
from tokentrace.cli.options import Align, CheckAnchors, Jobs, OffsetUs, ProfileId, Quiet
from tokentrace.options import AlignMode, MergeOptions
from tokentrace.runtime.cores import usable_cores


@app.command()
def merge(
    inputs: list[Path] = typer.Argument(..., help="A profile folder, or VIZ.json PROTON.chrome_trace [more Proton parts], or [VIZ.json] TORCH.trace.json.gz."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Output folder, or file name (.json / .json.gz)."),
    combine: bool = typer.Option(False, "--combine", help="Also write one file with every rank on a common time axis."),
    gzip_output: bool = typer.Option(False, "--gzip", help="Compress the output (implied by a .gz output name)."),
    align: Align = AlignMode.AUTO,
    offset_us: OffsetUs = None,
    profile_id: ProfileId = None,
    jobs: Jobs = None,
    check_anchors: CheckAnchors = True,
    quiet: Quiet = False,
) -> None:
    """Merge each rank's VizTracer report and GPU trace (Proton or torch profiler) onto one Perfetto timeline."""
    from tokentrace.merge import find_profile
    from tokentrace.merge import merge as merge_traces
    from tokentrace.merge.pipeline import check_options
    from tokentrace.runtime.command import command

    options = MergeOptions(align=align, offset_us=offset_us, check_anchors=check_anchors,
                           compress=gzip_output, combine=combine, profile_id=profile_id,
                           jobs=jobs or usable_cores())
    from tokentrace.cli.progress import StageLines

    with command(), user_errors():
        with StageLines(quiet) as lines:
            check_options(options)  # before discovery: a bad option is said first
            profile = find_profile(inputs, options.profile_id)
            lines.stage("merging ranks", len(profile.ranks))
            result = merge_traces(profile, output, options, progress=lines.advance)
    for rank in result.ranks:
        print(
            f"{rank.tag}: {rank.n_kernels} kernels, {rank.n_flows} flows, "
            f"offset {rank.alignment.offset_ns / 1e3:.3f} µs ({rank.alignment.method}) -> {rank.output}"
        )
    if result.combined is not None:
        print(f"all ranks -> {result.combined}")
