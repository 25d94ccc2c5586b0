"""``tokentrace view``: prepare the trace (merge a folder, annotate), serve it with the bundled
Perfetto UI on 127.0.0.1, open a browser, stop cleanly on Ctrl+C (or SIGTERM)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Optional

import typer

from tokentrace.annotate.links import DEFAULT_PORT
from tokentrace.cli.app import app, echo_err, user_errors


@app.command()
def view(
    target: Path = typer.Argument(
        ..., metavar="TRACE|DIR",
        help="A merged trace (.json / .json.gz), or a profile folder (merged first, cached)."),
    port: int = typer.Option(DEFAULT_PORT, "--port", min=0, max=65535,
                             help="Port on 127.0.0.1 (0: any free port)."),
    no_browser: bool = typer.Option(False, "--no-browser",
                                    help="Only serve and print the URL; do not open a browser."),
    min_gap_us: Optional[float] = typer.Option(
        None, "--min-gap-us", min=0,
        help="Shortest GPU gap drawn on the GPU idle track, µs (default: gap_causes' min_gap_us, 100)."),
) -> None:
    """Show the trace in the Perfetto UI, offline: GPU gaps named by their cause on a "GPU idle (tokentrace)" track."""
    with user_errors():
        from tokentrace.view import TraceServer, open_browser, prepare_trace

        served = prepare_trace(target, min_gap_us=min_gap_us)
        server = TraceServer(served.path, port, log=echo_err)
    with server:
        print(f"serving {served.path}" + ("" if served.annotated else " (no annotations)"))
        print(f"open {server.url}  (Ctrl+C to stop)", flush=True)
        if not no_browser and not open_browser(server.url):
            echo_err("no browser to open here; open the URL above in one")
        _serve_until_stopped(server)
    print("stopped", flush=True)


def _serve_until_stopped(server) -> None:
    """Serves until SIGINT or SIGTERM; both end the command normally (status 0). SIGINT is
    caught even where the parent started us with it ignored (a background job of a script)."""
    previous = {sig: signal.signal(sig, handler) for sig, handler in
                ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, _raise_interrupt))}
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
