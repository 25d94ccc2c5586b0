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
Jobs = Annotated[int, typer.Option("--jobs", "-j", min=1, help="Ranks merged in parallel (processes).")]
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
Wasm = Annotated[Optional[Path], typer.Option("--wasm", help="Another trace_processor.wasm.")]


def engine_options(engine: str, wasm: Path | None, shell: Path | None,
                   address: str | None) -> EngineOptions:
    """The engine options from the shared engine flags."""
    return EngineOptions(engine, wasm_path=wasm, shell_path=shell, address=address)
