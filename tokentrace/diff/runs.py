"""One side of a diff: a run's query tables.

Read from an ``analyze`` output folder's ``tables/*.parquet`` when it has them all, else
computed by the bundled queries (:data:`DIFF_QUERIES`) on a profile folder, a merged or raw
trace, or a trace already open in the notebook facade. SQL stays the source of every figure:
the diff only joins these tables.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pandas as pd

from tokentrace.catalog import effective_params, find_query
from tokentrace.diff.setup import read_setup
from tokentrace.errors import InputError
from tokentrace.notebook import Analysis, open_for_batch
from tokentrace.options import AnalyzeOptions

# The bundled queries a diff reads, in the order they run.
DIFF_QUERIES = ("trace_health", "gpu_windows", "idle_budget", "gap_causes", "kernel_summary",
                "step_breakdown", "rank_summary")


@dataclasses.dataclass
class RunTables:
    """The query tables of one run.

    Attributes:
        source: what was given (a path, or the open trace's source).
        kind: ``analyze output``, ``profile folder``, ``trace file`` or ``open trace``.
        tables: ``{query name: rows}`` for every name of :data:`DIFF_QUERIES`.
        params: ``{query name: the parameters its rows were computed with}`` (header defaults
            filled in; read from the Parquet metadata of an ``analyze`` output).
        setup: what the run ran on, as its raw inputs state it (GPU model, driver and runtime
            versions, world size: :func:`tokentrace.diff.setup.read_setup`); ``{}`` when
            they state nothing (Proton and VizTracer traces).
    """

    source: str
    kind: str
    tables: dict[str, pd.DataFrame]
    params: dict[str, dict]
    setup: dict = dataclasses.field(default_factory=dict)


def is_analyze_output(path: Path) -> bool:
    """True for a folder written by ``tokentrace analyze`` (it holds ``tables/idle_budget.parquet``)."""
    return (path / "tables" / "idle_budget.parquet").is_file()


def load_run(source: str | os.PathLike | Analysis, options: AnalyzeOptions,
             cache_dir: str | os.PathLike | None = None, progress=None) -> RunTables:
    """The tables of one run.

    Args:
        source: an ``analyze`` output folder, a profile folder, a merged or raw trace file, or
            an open :class:`~tokentrace.notebook.Analysis`.
        options: merge, engine and query settings for a run whose tables are computed here
            (an ``analyze`` output keeps the parameters it was written with).
        cache_dir: where a profile folder's (or a raw torch-profiler trace's) merge is cached
            (default: the user cache, shared with ``analyze``, ``view`` and
            :func:`tokentrace.open`: :mod:`tokentrace.merge.cache`; nothing is written beside
            the inputs).
        progress: told of each stage and rank (``stage(name, total)``, ``advance(label)``:
            :class:`tokentrace.report.pipeline.Stages`; default: nothing).

    Raises:
        InputError: the path does not exist, or an ``analyze`` output lacks a table.
    """
    if isinstance(source, Analysis):
        if progress is not None:
            progress.stage("queries", len(source.ranks.traces))
        run = _query(source, options, str(source.source), "open trace")
        return dataclasses.replace(run, setup=read_setup(source.source))
    path = Path(source).expanduser()
    if not path.exists():
        raise InputError(f"{path}: no such profile folder, trace file or analyze output; check the path")
    if path.is_dir() and is_analyze_output(path):
        if progress is not None:
            progress.stage("reading the analyze tables")
        return dataclasses.replace(_read_tables(path), setup=read_setup(path))
    loaded = _merged_kineto(path, options, cache_dir, progress) or path
    with open_for_batch(loaded, requests(options), cache_dir=cache_dir,
                        merge=options.merge if path.is_dir() else None, engine=options.engine,
                        jobs=options.query_jobs(), executor=options.executor,
                        progress=progress) as trace:
        if progress is not None and not trace.queried_while_merged:
            progress.stage("queries", len(trace.ranks.traces))
        run = _query(trace, options, str(path), "profile folder" if path.is_dir() else "trace file")
    return dataclasses.replace(run, setup=read_setup(path))


def _merged_kineto(path: Path, options: AnalyzeOptions, cache_dir, progress=None) -> Path | None:
    """A raw torch-profiler trace merged first, through the merge cache (``cache_dir``, else the
    user cache, as a profile folder is; reused while the file is unchanged), so its rank is the
    one it states (``distributedInfo``) and its processes are one rank, as in a profile folder;
    ``None`` for anything else (loaded as it is)."""
    from tokentrace.sources.detect import TraceKind, sniff

    if not path.is_file() or sniff(path) is not TraceKind.KINETO:
        return None
    from tokentrace.merge.cache import merged_folder

    if progress is not None:
        progress.stage("merging the trace")
    merged = merged_folder(path, cache_dir, options.merge, combined=False,
                           progress=progress.advance if progress is not None else None)
    return merged.ranks[0][1]


def requests(options: AnalyzeOptions) -> list[tuple[str, str, dict]]:
    """The batch of :data:`DIFF_QUERIES` with the query parameters the user set (each query
    gets those it declares; the rest take their query's default)."""
    given = options.query_params()
    batch = []
    for name in DIFF_QUERIES:
        spec = find_query(name)
        batch.append((name, name, {k: v for k, v in given.items() if spec.param(k) is not None}))
    return batch


def _query(trace: Analysis, options: AnalyzeOptions, source: str, kind: str) -> RunTables:
    batch = requests(options)
    tables = trace.run_many(batch)
    params = {name: effective_params(find_query(query), given) for name, query, given in batch}
    return RunTables(source, kind, {name: tables[name] for name in DIFF_QUERIES}, params)


def _read_tables(folder: Path) -> RunTables:
    from tokentrace.catalog.export import read_metadata

    files = {name: folder / "tables" / f"{name}.parquet" for name in DIFF_QUERIES}
    missing = [name for name, file in files.items() if not file.is_file()]
    if missing:
        raise InputError(f"{folder}: an analyze output without tables/{', '.join(missing)}.parquet "
                         "(written by an older tokentrace?); run tokentrace analyze again, or "
                         "pass the profile folder")
    tables = {name: pd.read_parquet(file) for name, file in files.items()}
    params = {name: dict(read_metadata(file).get("parameters") or {}) for name, file in files.items()}
    return RunTables(str(folder), "analyze output", tables, params)
