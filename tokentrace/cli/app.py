"""The typer application and the one error boundary every command goes through."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator

import typer

from tokentrace.errors import TokentraceError, TokentraceWarning

app = typer.Typer(
    name="tokentrace",
    help="Why do your GPUs sit idle? Merge VizTracer + Proton or torch-profiler traces per rank, query them with "
    "Perfetto's TraceProcessor, and find the host stalls behind GPU gaps.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _show_version(value: bool) -> None:
    if value:
        from tokentrace.version import tool_version

        print(f"tokentrace {tool_version()}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_show_version,
                                 help="Print the version and exit."),
) -> None:
    """Why do your GPUs sit idle? Merge VizTracer + Proton or torch-profiler traces per rank,
    query them with Perfetto's TraceProcessor, and find the host stalls behind GPU gaps."""


def echo_err(message: str) -> None:
    """Prints one line on standard error."""
    print(message, file=sys.stderr)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Maps a :class:`TokentraceError` to ``error: <message>`` and exit status 1, and prints the
    :class:`TokentraceWarning` s raised inside, each once, when the command ends."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TokentraceWarning)
        try:
            yield
        except TokentraceError as exc:
            _print_warnings(caught)
            echo_err(f"error: {exc}")
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            echo_err("error: interrupted")
            raise typer.Exit(130) from None
    _print_warnings(caught)


def _print_warnings(caught: list[warnings.WarningMessage]) -> None:
    seen: set[str] = set()
    for item in caught:
        text = str(item.message)
        if issubclass(item.category, TokentraceWarning) and text not in seen:
            seen.add(text)
            echo_err(f"warning: {text}")
        elif not issubclass(item.category, TokentraceWarning):
            warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)
