"""The report's figures as SVG files (:func:`write_plots`), drawn from the query rows by
:mod:`tokentrace.report.charts` in this process: a few milliseconds each, so nothing is forked
or drawn ahead for them."""

from __future__ import annotations

from pathlib import Path

from tokentrace.report import charts
from tokentrace.report.tables import of_ranks, ranks_apart
from tokentrace.runtime.files import make_folder, write_bytes


def plot_requests(results: dict, detail: list[str]) -> list[tuple[str, str, tuple]]:
    """The report's figures as ``(name, tokentrace.report.charts function, its arguments)``, in
    the report's order; those with a row per rank show the ``detail`` ranks, the heatmap all
    ranks."""
    requests = [("timeline", "timeline", (of_ranks(results["gpu_windows"], detail),
                                          of_ranks(results["gap_causes"], detail))),
                ("stall_profile", "stall_profile", (of_ranks(results["host_stall_profile"], detail),))]
    if "idle_budget" in results:
        requests.append(("idle_budget", "idle_budget", (results["idle_budget"],)))
    if "step_breakdown" in results:
        requests.append(("idle_heatmap", "idle_heatmap", (results["step_breakdown"],)))
        requests.append(("step_breakdown", "step_breakdown", (of_ranks(results["step_breakdown"], detail),)))
    if "rank_skew" in results and not (results["rank_skew"].empty and ranks_apart(results.get("trace_health"))):
        # (ranks recorded apart: no rank is compared, and a health line says so)
        requests.append(("rank_skew", "rank_skew", (results["rank_skew"],)))
    return requests


def write_plots(results: dict, detail: list[str], folder: Path) -> dict[str, Path]:
    """Writes the report's figures (:func:`plot_requests`) as ``<folder>/<name>.svg``.

    Written through :func:`~tokentrace.runtime.files.write_bytes` into a folder made by
    :func:`~tokentrace.runtime.files.make_folder`, like every other output: renamed into place
    when complete, part of the command's journal, and never readable by more users than the
    command's inputs.

    Args:
        results: the report's query rows by table name.
        detail: the ranks drawn in the per-rank figures.
        folder: created if missing.

    Returns:
        ``{name: svg path}`` in the report's order.
    """
    requests = plot_requests(results, detail)
    drawn = {name: getattr(charts, function)(*arguments).encode("utf-8")
             for name, function, arguments in requests}
    make_folder(folder)
    return {name: write_bytes(folder / f"{name}.svg", drawn[name]) for name, _, _ in requests}
