"""The report's plots as PNG files (:func:`write_plots`), rendered in two processes when the
report may use more than one core.

Rendering is the report's longest single-threaded step once the queries are done: importing
matplotlib (~0.3 s) and drawing six figures (~0.15 s each, t39_tp2), while every other core
idles. With ``jobs`` > 1 a forked child renders every other figure while this process renders
the rest; each figure is drawn by the same code from the same rows either way, so the PNG files
are the same bytes (tests/report/test_figures.py).
"""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

from tokentrace.report.tables import of_ranks

PNG_DPI = 110


def plot_requests(results: dict, detail: list[str]) -> list[tuple[str, str, tuple]]:
    """The report's figures as ``(name, tokentrace.plots function, its arguments)``, in the
    report's order; those with a row per rank show the ``detail`` ranks, the heatmap all ranks."""
    requests = [("timeline", "plot_timeline", (of_ranks(results["gpu_windows"], detail),
                                               of_ranks(results["gap_causes"], detail))),
                ("stall_profile", "plot_stall_profile", (of_ranks(results["host_stall_profile"], detail),))]
    if "idle_budget" in results:
        requests.append(("idle_budget", "plot_idle_budget", (results["idle_budget"],)))
    if "step_breakdown" in results:
        requests.append(("idle_heatmap", "plot_idle_heatmap", (results["step_breakdown"],)))
        requests.append(("step_breakdown", "plot_step_breakdown", (of_ranks(results["step_breakdown"], detail),)))
    if "rank_skew" in results:
        requests.append(("rank_skew", "plot_rank_skew", (results["rank_skew"],)))
    return requests


def write_plots(results: dict, detail: list[str], folder: Path, jobs: int = 1) -> dict[str, Path]:
    """Writes the report's figures (:func:`plot_requests`) as ``<folder>/<name>.png``.

    Args:
        results: the report's query rows by table name.
        detail: the ranks drawn in the per-rank figures.
        folder: created if missing.
        jobs: more than 1 lets a forked child render half of the figures.

    Returns:
        ``{name: png path}`` in the report's order.
    """
    requests = plot_requests(results, detail)
    folder.mkdir(parents=True, exist_ok=True)
    if jobs > 1 and len(requests) > 1 and _may_fork():
        import concurrent.futures

        with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
            theirs = pool.submit(render, requests[1::2], folder)
            render(requests[0::2], folder)
            theirs.result()
    else:
        render(requests, folder)
    return {name: folder / f"{name}.png" for name, _, _ in requests}


def render(requests: list[tuple[str, str, tuple]], folder: Path) -> None:
    """Draws and saves each requested figure (in the caller's process)."""
    from tokentrace import plots

    for name, function, arguments in requests:
        getattr(plots, function)(*arguments).savefig(folder / f"{name}.png", dpi=PNG_DPI)


def _may_fork() -> bool:
    """Whether a child may be forked safely: the platform forks and this process runs no other
    thread (a lock another thread held at the fork would stay held in the child)."""
    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1
