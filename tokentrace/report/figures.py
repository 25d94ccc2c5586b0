"""The report's plots as PNG files (:func:`write_plots`), rendered in two processes when the
report may use more than one core.

Rendering is the report's longest single-threaded step once the queries are done: importing
matplotlib and drawing the figures one after another, while every other core idles. With
``jobs`` > 1 a forked child renders every other figure while this process renders the rest; each
figure is drawn by the same code from the same rows either way, so the PNG files are the same
bytes (tests/report/test_figures.py).

``tokentrace analyze`` forks its renderer when it starts (:class:`FigureRenderer`): the child
imports matplotlib and draws one small figure while the analysis runs
(:func:`tokentrace.report.plots.warm_up`: the fonts and the layout engine set up, which the
first figure of each of the two drawing processes would pay otherwise; a copy forked after the
warm-up inherits them), and when the rows are there it draws every other figure while a forked
copy of it draws the rest: what is left after the queries is drawing alone, on two cores.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
from collections.abc import Callable
from pathlib import Path

from tokentrace.report.tables import of_ranks, ranks_apart
from tokentrace.runtime.files import make_folder, write_bytes
from tokentrace.runtime.processes import ForkedCall, can_fork, stops_child_on_raise

PNG_DPI = 110


def plot_requests(results: dict, detail: list[str]) -> list[tuple[str, str, tuple]]:
    """The report's figures as ``(name, tokentrace.report.plots function, its arguments)``, in the
    report's order; those with a row per rank show the ``detail`` ranks, the heatmap all ranks."""
    requests = [("timeline", "plot_timeline", (of_ranks(results["gpu_windows"], detail),
                                               of_ranks(results["gap_causes"], detail))),
                ("stall_profile", "plot_stall_profile", (of_ranks(results["host_stall_profile"], detail),))]
    if "idle_budget" in results:
        requests.append(("idle_budget", "plot_idle_budget", (results["idle_budget"],)))
    if "step_breakdown" in results:
        requests.append(("idle_heatmap", "plot_idle_heatmap", (results["step_breakdown"],)))
        requests.append(("step_breakdown", "plot_step_breakdown", (of_ranks(results["step_breakdown"], detail),)))
    if "rank_skew" in results and not (results["rank_skew"].empty and ranks_apart(results.get("trace_health"))):
        # (ranks recorded apart: no rank is compared, and a health line says so)
        requests.append(("rank_skew", "plot_rank_skew", (results["rank_skew"],)))
    return requests


def write_plots(results: dict, detail: list[str], folder: Path, jobs: int = 1,
                draw: Callable[[list], dict[str, bytes]] | None = None) -> dict[str, Path]:
    """Writes the report's figures (:func:`plot_requests`) as ``<folder>/<name>.png``.

    The figures are drawn into memory (in forked children too) and written here, through
    :func:`~tokentrace.runtime.files.write_bytes` into a folder made by
    :func:`~tokentrace.runtime.files.make_folder`, like every other output: renamed into place
    when complete, part of the command's journal, and never readable by more users than the
    command's inputs.

    Args:
        results: the report's query rows by table name.
        detail: the ranks drawn in the per-rank figures.
        folder: created if missing.
        jobs: more than 1 lets a forked child draw half of the figures.
        draw: draws ``requests`` instead, returning ``{name: PNG bytes}`` (:class:`FigureRenderer`'s
            child).

    Returns:
        ``{name: png path}`` in the report's order.
    """
    requests = plot_requests(results, detail)
    drawn = (draw or (render_split if jobs > 1 else render))(requests)
    make_folder(folder)
    return {name: write_bytes(folder / f"{name}.png", drawn[name]) for name, _, _ in requests}


def render_split(requests: list[tuple[str, str, tuple]]) -> dict[str, bytes]:
    """Draws every other figure in a forked copy of this process and the rest here (all here
    when a fork is not safe); ``{name: PNG bytes}``."""
    if len(requests) > 1 and can_fork():
        with ForkedCall(lambda _: render(requests[1::2]), "drawing figures") as other:
            here = render(requests[0::2])
            return here | other.result()
    return render(requests)


def render(requests: list[tuple[str, str, tuple]]) -> dict[str, bytes]:
    """Draws each requested figure in this process: ``{name: PNG bytes}``."""
    from tokentrace.report import plots

    drawn = {}
    for name, function, arguments in requests:
        png = io.BytesIO()
        getattr(plots, function)(*arguments).savefig(png, dpi=PNG_DPI, format="png")
        drawn[name] = png.getvalue()
    return drawn


#: The length prefix of the renderer's request (the pipe's write end may stay open in other
#: children forked later, so its end is never the request's end).
_LENGTH = struct.Struct("<Q")


class NoFigures:
    """:class:`FigureRenderer`'s stand-in for ``--no-plots``: draws nothing, forks nothing."""

    def __enter__(self) -> NoFigures:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def write(self, results: dict, detail: list[str], folder: Path) -> dict[str, Path]:
        """No figure: ``{}``."""
        return {}


class FigureRenderer:
    """Renders the report's figures in a child forked when the analysis starts, which imports
    matplotlib meanwhile; a context manager that never leaves the child running.

    Usage: ``with FigureRenderer(jobs) as renderer: ...; renderer.write(results, detail, folder)``.
    With ``jobs`` 1 or no safe fork, :meth:`write` renders in this process (:func:`write_plots`).
    """

    def __init__(self, jobs: int) -> None:
        self._jobs = jobs
        self._child: ForkedCall | None = None
        self._requests: int | None = None  # the write end of the request pipe

    @stops_child_on_raise
    def __enter__(self) -> FigureRenderer:
        if self._jobs > 1 and can_fork():
            read_end, write_end = os.pipe()
            self._requests = write_end
            try:
                child = ForkedCall(lambda _: _serve(read_end, write_end), "drawing the report's figures")
                self._child = child.__enter__()
            finally:
                os.close(read_end)
        return self

    def write(self, results: dict, detail: list[str], folder: Path) -> dict[str, Path]:
        """:func:`write_plots` by the child (or here without one)."""
        return write_plots(results, detail, folder, self._jobs,
                           None if self._child is None else self._draw)

    def _draw(self, requests: list) -> dict[str, bytes]:
        """Sends the requests to the child and waits for its figures."""
        payload = pickle.dumps(requests, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(_LENGTH.pack(len(payload)) + payload)
        try:
            while view:
                view = view[os.write(self._requests, view):]
        except BrokenPipeError:
            pass  # the child has ended: its result (an error) says why
        drawn = self._child.result()
        self._close()
        return drawn

    def __exit__(self, *exc) -> None:
        self._close()

    def _close(self) -> None:
        if self._child is not None:
            self._child.__exit__(None, None, None)  # stops it if it still runs
            self._child = None
        if self._requests is not None:
            os.close(self._requests)
            self._requests = None


def _serve(read_end: int, write_end: int) -> dict[str, bytes]:
    """The renderer child: imports the plotting code, waits for one request, draws it."""
    os.close(write_end)
    from tokentrace.report import plots

    plots.warm_up()  # matplotlib's imports and fonts, while the analysis runs

    head = _read_exactly(read_end, _LENGTH.size)
    requests = pickle.loads(_read_exactly(read_end, _LENGTH.unpack(head)[0]))
    return render_split(requests)


def _read_exactly(fd: int, size: int) -> bytes:
    pieces, left = [], size
    while left:
        piece = os.read(fd, min(left, 1 << 20))
        if not piece:
            raise EOFError("the analysis closed the figure request early")
        pieces.append(piece)
        left -= len(piece)
    return b"".join(pieces)
