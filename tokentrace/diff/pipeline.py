"""``tokentrace diff`` as library calls: :func:`diff` reads or computes both runs' query tables
and joins them (:mod:`.tables`), words the result (:mod:`.verdict`); :func:`write_diff` writes
the tables as Parquet and ``diff.html``."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pandas as pd

from tokentrace.diff import setup, tables, verdict
from tokentrace.diff.runs import RunTables, load_run
from tokentrace.notebook import Analysis
from tokentrace.options import AnalyzeOptions

# The tables of a diff, in the order they are written and shown.
DIFF_TABLES = ("setup_diff", "rank_diff", "idle_budget_diff", "cause_diff", "kernel_diff", "step_diff")


@dataclasses.dataclass
class DiffResult:
    """Two runs compared rank by rank (times in ns; see docs/diff.md for every column).

    Attributes:
        before, after: what was compared (paths as given).
        setup_diff: what each run ran on (GPU model, driver and runtime versions, world size,
            profiler, step), one row per fact, and whether the two agree.
        rank_diff: one row per rank of either run: idle share before/after, comparability.
        idle_budget_diff: ``idle_budget`` of both runs side by side (ranks of both runs).
        cause_diff: host causes matched by (kind, function): appeared, disappeared, changed.
        kernel_diff: kernels matched by short name: count, total, mean, per step.
        step_diff: step time p50/p90/p99 and idle per step.
        notes: what was not compared like for like (ranks of one run only, another GPU
            profiler or step definition, other query parameters).
        verdict: the change in words, one line each (what the terminal prints).
    """

    before: str
    after: str
    setup_diff: pd.DataFrame
    rank_diff: pd.DataFrame
    idle_budget_diff: pd.DataFrame
    cause_diff: pd.DataFrame
    kernel_diff: pd.DataFrame
    step_diff: pd.DataFrame
    notes: list[str]
    verdict: list[str]

    def tables(self) -> dict[str, pd.DataFrame]:
        """``{name: table}`` in :data:`DIFF_TABLES` order."""
        return {name: getattr(self, name) for name in DIFF_TABLES}

    def regressions(self, points: float) -> list[str]:
        """Why ``--fail-on-regression points`` fails (empty: it passes): a rank's step time p50
        grew by more than ``points`` % (the same step on both sides), its GPU idle share grew
        by more than ``points`` percentage points, or a new stall cause costs more than
        ``points`` % of a rank's active time."""
        return verdict.regressions(self.rank_diff, self.cause_diff, points, self.step_diff)


def diff(before: str | os.PathLike | Analysis, after: str | os.PathLike | Analysis,
         options: AnalyzeOptions | None = None,
         cache_dirs: tuple[str | os.PathLike | None, str | os.PathLike | None] = (None, None),
         progress=None) -> DiffResult:
    """Compares two runs: profile folders, merged traces, ``analyze`` output folders (their
    ``tables/*.parquet`` reused) or traces open in the notebook facade.

    Args:
        before, after: the two runs.
        options: merge, engine and query settings for runs whose tables are computed here.
        cache_dirs: where each profile folder's merge is cached (default: the user cache,
            shared with ``analyze``, ``view`` and :func:`tokentrace.open`, and reused by later
            diffs whichever side a run is on; nothing is written into a profile folder).
        progress: told of each stage, named after its side (``before: merging ranks``), and
            rank (``stage(name, total)``, ``advance(label)``:
            :class:`tokentrace.report.pipeline.Stages`; default: nothing).

    Example::

        change = tokentrace.diff("profiles/before", "profiles/after")
        print("\\n".join(change.verdict))
        change.cause_diff[change.cause_diff["status"] == "disappeared"]

    Raises:
        TokentraceError: bad inputs, merge, engine or query failures (see the message).
    """
    options = options or AnalyzeOptions()
    first = load_run(before, options, cache_dirs[0], _Side.of(progress, "before"))
    second = (first if _same(before, after)
              else load_run(after, options, cache_dirs[1], _Side.of(progress, "after")))
    return compare(first, second)


class _Side:
    """A ``progress`` whose stages are named after the run they work on (``after: queries``):
    the two runs' stages are told apart, and the second run's first stage is not taken for the
    first run's still going (a stage line is shown once per name in a row)."""

    def __init__(self, progress, side: str) -> None:
        self._progress, self._side = progress, side

    @classmethod
    def of(cls, progress, side: str):
        return None if progress is None else cls(progress, side)

    def stage(self, name: str, total: int | None = None) -> None:
        self._progress.stage(f"{self._side}: {name}", total)

    def advance(self, label: str = "") -> None:
        self._progress.advance(label)


def compare(before: RunTables, after: RunTables) -> DiffResult:
    """The diff of two runs' tables (:func:`diff` once both are read). Its verdict leads with
    what makes the runs not like for like, then the work (step time, GPU busy per step), then
    the idle. Two runs of one rank each, of different tags (``TP3`` of 8 against ``TP1`` of 2),
    are compared with each other as ``TP3 vs TP1``."""
    before, after, paired = _pair_lone_ranks(before, after)
    facts = setup.setup_diff(before, after)
    unlike = setup.setup_line(facts)
    ranks = tables.rank_diff(before, after)
    ranks["comparable"] &= not unlike
    both = tables.matched_ranks(ranks)
    budget = tables.idle_budget_diff(before, after, both)
    causes = tables.cause_diff(before, after, both)
    kernels = tables.kernel_diff(before, after, both)
    steps = tables.step_diff(before, after, both)
    notes = paired + _notes(before, after, ranks)
    lines = (unlike + verdict.step_lines(steps, ranks) + verdict.rank_lines(ranks) + verdict.mover_lines(budget)
             + verdict.stall_kind_lines(causes) + verdict.cause_lines(causes)
             + verdict.recovered_lines(causes, ranks, unlike[0].split(": ", 1)[1] if unlike else ""))
    return DiffResult(before.source, after.source, facts, ranks, budget, causes, kernels, steps, notes, lines)


def _pair_lone_ranks(before: RunTables, after: RunTables) -> tuple[RunTables, RunTables, list[str]]:
    """Two runs of one GPU rank each whose tags differ: both ranks renamed ``<before> vs
    <after>`` in every table, so they are compared; other runs unchanged."""
    old, new = (set(run.tables["gpu_windows"]["rank"]) for run in (before, after))
    if len(old) != 1 or len(new) != 1 or old == new:
        return before, after, []
    (b,), (a,) = old, new
    tag = f"{b} vs {a}"

    def renamed(run: RunTables, rank: str) -> RunTables:
        return dataclasses.replace(run, tables={name: rows.assign(rank=rows["rank"].astype(object).replace(rank, tag))
                                                for name, rows in run.tables.items()})
    return (renamed(before, b), renamed(after, a),
            [f"{tag}: each run has one rank ({b} before, {a} after): compared with each other"])


def _same(before, after) -> bool:
    if isinstance(before, Analysis) or isinstance(after, Analysis):
        return before is after
    return Path(before).expanduser().resolve() == Path(after).expanduser().resolve()


def _notes(before: RunTables, after: RunTables, ranks: pd.DataFrame) -> list[str]:
    notes = [f"{r['rank']}: in the {r['status'].split()[0]} run only; not compared"
             for _, r in ranks.iterrows() if r["status"] != "both"]
    for _, r in ranks[ranks["status"] == "both"].iterrows():
        if (r["before_gpu_format"] or "") != (r["after_gpu_format"] or ""):
            notes.append(f"{r['rank']}: GPU side recorded by {r['before_gpu_format']} before and "
                         f"{r['after_gpu_format']} after: kernels and launches differ by profiler")
        if r["before_step"] != r["after_step"]:
            notes.append(f"{r['rank']}: steps differ: {r['before_step'] or 'none found'} before, "
                         f"{r['after_step'] or 'none found'} after: per-step figures do not "
                         "compare; pass --step-name to use one definition")
    for name in before.params:
        old, new = before.params[name], after.params.get(name, {})
        moved = [f"{k} {old[k]} -> {new[k]}" for k in old if k in new and str(old[k]) != str(new[k])]
        if moved:
            notes.append(f"{name} computed with other parameters: {', '.join(moved)}")
    return notes


def write_diff(result: DiffResult, output: str | os.PathLike) -> dict[str, Path]:
    """Writes ``OUT/tables/<name>.parquet`` for every table and ``OUT/diff.html``; returns
    ``{name: path}`` (the page as ``diff.html``)."""
    from tokentrace.catalog.export import result_metadata, write_result
    from tokentrace.diff.html import write_diff_html

    out = Path(output)
    meta = result_metadata("tokentrace.diff", {"before": result.before, "after": result.after},
                           None, "tables joined from both runs' query tables")
    written = {name: write_result(frame, out / "tables" / f"{name}.parquet", meta)
               for name, frame in result.tables().items()}
    written["diff.html"] = write_diff_html(out / "diff.html", result)
    return written
