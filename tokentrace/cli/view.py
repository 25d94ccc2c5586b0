"""``tokentrace view``: prepare the trace (merge a folder, annotate), serve it with the bundled
Perfetto UI on 127.0.0.1, open a browser, stop on Ctrl+C.

It runs under the one cleanup path of the commands (:func:`tokentrace.runtime.command.command`):

* The options, the target and the port are checked first (the port is bound then), each bad one
  an ``error:`` line and status 1 before any work.
* While the trace is prepared, an error is one ``error:`` line (status 1) and SIGINT, SIGTERM or
  SIGHUP one ``error:`` line and status 130, 143 or 129, as for ``merge``: no temp file, no
  partial cache entry (:mod:`tokentrace.view.prepare`), the port freed.
* While serving, Ctrl+C (SIGINT) is the way to stop: ``stopped``, status 0 (also when started
  as a background job, which ignores SIGINT). SIGTERM or SIGHUP stop it too, with ``stopped
  (terminated by SIGTERM)`` and status 143 (129): the port is freed, every connection ended, and
  the prepared trace stays in the cache.

Only the user who started it can read through it (docs/view.md): it listens on 127.0.0.1 and
answers only requests carrying the random token of the URL it prints (``?token=...``; the
browser keeps it in a cookie once that URL is opened).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import typer

from tokentrace.annotate.links import DEFAULT_PORT
from tokentrace.cli.app import app, echo_err, user_errors
from tokentrace.cli.options import Quiet


@app.command()
def view(
    target: Path = typer.Argument(
        ..., metavar="TRACE|DIR",
        help="A merged trace (.json / .json.gz), a profile folder (merged first, cached in the "
             "user cache: nothing is written into it), or a tokentrace analyze output folder "
             "(its annotated trace)."),
    port: int = typer.Option(DEFAULT_PORT, "--port", help="Port on 127.0.0.1 (0: any free port)."),
    no_browser: bool = typer.Option(False, "--no-browser",
                                    help="Only serve and print the URL; do not open a browser."),
    min_gap_us: Optional[float] = typer.Option(
        None, "--min-gap-us",
        help="Shortest GPU gap drawn on the GPU idle track, µs (default: gap_causes' min_gap_us, 100)."),
    quiet: Quiet = False,
) -> None:
    """Show the trace in the Perfetto UI, offline: GPU gaps named by their cause on a "GPU idle (tokentrace)" track.

    Serves on 127.0.0.1 only; open the URL it prints, which holds a random token
    (http://127.0.0.1:PORT/?token=...): a request without it gets 403, so other users of the
    machine cannot read the trace. Over ssh: ssh -L PORT:127.0.0.1:PORT host, then open that
    URL on your machine.
    """
    from tokentrace.runtime.command import command
    from tokentrace.runtime.signals import sigint_caught

    with sigint_caught(), command():
        with user_errors():
            server = check_before_work(target, port, min_gap_us)
        with server:
            with user_errors():
                from tokentrace.view import prepare_trace

                with _stage_lines(target, quiet):
                    served = prepare_trace(target, min_gap_us=min_gap_us)
                server.set_trace(served.path)
            line, status = _serve_until_stopped(server, served, no_browser)
    print(line, flush=True)
    if status:
        raise typer.Exit(status)


def check_before_work(target: Path, port: int, min_gap_us: float | None):
    """The options and the target checked, and the port bound, before anything is merged or
    written; returns the (not yet serving) :class:`~tokentrace.view.TraceServer`.

    Raises:
        InputError: naming the option or path and what to do.
    """
    from tokentrace.cli.options import check_finite
    from tokentrace.errors import InputError
    from tokentrace.view import TraceServer
    from tokentrace.view.prepare import check_target

    check_finite("--min-gap-us", min_gap_us)
    if not 0 <= port <= 65535:
        raise InputError(f"--port {port}: give a port from 1 to 65535, or 0 for any free port")
    check_target(target, min_gap_us)
    return TraceServer(None, port, log=echo_err)


@contextlib.contextmanager
def _stage_lines(target: Path, quiet: bool):
    """The stage line of the preparation (a profile folder is merged and annotated first; an
    ``analyze`` output folder or an annotated trace is served at once), and the first
    compile's note."""
    from tokentrace.cli.progress import StageLines, compile_note
    from tokentrace.options import EngineOptions

    with StageLines(quiet) as lines:
        if target.is_dir() and not (target / "annotated").is_dir():
            compile_note(lines, EngineOptions())
            lines.stage("merging (cached) and annotating the profile folder")
        yield lines


def _serve_until_stopped(server, served, no_browser: bool) -> tuple[str, int]:
    """Serves until a signal; returns the line to print and the exit status: ``stopped`` and 0
    for SIGINT, ``stopped (terminated by SIGTERM)`` and 128 + the signal for SIGTERM, SIGHUP.
    The signals are the exceptions of :func:`tokentrace.runtime.signals.signals_raise` (the first one
    only: the ones after it wait for the port to be freed)."""
    from tokentrace.runtime.signals import Terminated
    from tokentrace.view import open_browser

    try:
        print(f"serving {served.path}" + ("" if served.annotated else " (no annotations)"))
        # the whole URL, token included: it is the one way in (no other user can read it here)
        print(f"open {server.url}  (Ctrl+C to stop)", flush=True)
        with contextlib.ExitStack() as browser:
            if not no_browser and not browser.enter_context(open_browser(server.url)):
                echo_err("no browser to open here; open the URL above in one")
            server.serve_forever()
    except KeyboardInterrupt:
        return "stopped", 0
    except Terminated as exc:
        return f"stopped ({exc})", exc.exit_code
    return "stopped", 0  # serve_forever returns only after a shutdown(): not from here
