"""``tokentrace record -o DIR [--gpu torch|proton] -- python serve.py ...``: check the options,
then become the program, wrapped so that it records itself (:mod:`tokentrace.record.command`,
:mod:`tokentrace.record.run`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from tokentrace.cli.app import app, echo_err
from tokentrace.record.options import DEFAULT_TRACER_ENTRIES, GPU_PROFILERS

USAGE_ERROR = 2  # click's status for a usage error
NOT_FOUND = 127  # a shell's status for a program it cannot find


@app.command(context_settings={"allow_interspersed_args": False})
def record(
    command: Optional[list[str]] = typer.Argument(None, metavar="-- PROGRAM...", help="The Python program: python [OPTIONS] SCRIPT.py [ARGS], python -m MODULE [ARGS], or SCRIPT.py [ARGS]."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="The profile folder (made when missing; its name is the profile id)."),
    gpu: str = typer.Option("torch", "--gpu", help="The GPU profiler: torch (torch.profiler, CPU + CUDA) or proton (Triton Proton, chrome trace)."),
    rank: Optional[int] = typer.Option(None, "--rank", help="The rank in the file names when torch.distributed is not initialised when recording starts (default: $RANK, else 0)."),
    skip: int = typer.Option(0, "--skip", help="tokentrace.step() marks to let pass before recording starts (warm-up)."),
    steps: Optional[int] = typer.Option(None, "--steps", help="tokentrace.step() marks to record; recording stops at the last (default: when the program ends)."),
    profile_id: Optional[str] = typer.Option(None, "--profile-id", help="The profile id in the file names (default: the folder's name)."),
    tracer_entries: int = typer.Option(DEFAULT_TRACER_ENTRIES, "--tracer-entries", help="VizTracer's ring buffer, in entries (88 bytes each, touched as used)."),
) -> None:
    """Run a Python program with VizTracer and a GPU profiler on, writing the files tokentrace analyze reads.

    The program records itself (python -m tokentrace.record.run runs it in this process's place) and keeps its exit status.

    Call tokentrace.step() once per step to bound the window with --skip and --steps.

    Example: tokentrace record -o profiles/run1 --gpu torch --skip 10 --steps 50 -- python serve.py
    """
    from tokentrace.record.command import CommandError, wrapped
    from tokentrace.record.options import RecordError, RecordOptions, check_values
    from tokentrace.runtime.child import become

    if output is None:
        _usage("-o DIR is required: the profile folder the recording writes")
    if gpu not in GPU_PROFILERS:
        _usage(f"--gpu {gpu}: choose {' or '.join(GPU_PROFILERS)}")
    options = RecordOptions(output, gpu, rank, skip, steps, profile_id, tracer_entries)
    try:
        check_values(options)
        argv = wrapped(command or [], options)
    except (RecordError, CommandError) as exc:
        _usage(str(exc))
    try:
        become(argv, _child_environment())
    except OSError as exc:
        echo_err(f"error: {argv[0]}: cannot run it ({exc.strerror or exc})")
        raise typer.Exit(NOT_FOUND if isinstance(exc, FileNotFoundError) else 126) from None


def _usage(message: str) -> None:
    echo_err(f"error: {message}")
    raise typer.Exit(USAGE_ERROR)


def _child_environment() -> dict[str, str]:
    """This environment, less what the console script set for its own commands."""
    import os

    from tokentrace.cli import ENV_BEFORE

    env = dict(os.environ)
    for name, value in ENV_BEFORE.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env
