"""``tokentrace query`` and ``tokentrace queries``: run bundled or own PerfettoSQL on a trace."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Optional

import typer

from tokentrace.cli.app import app, user_errors
from tokentrace.cli.options import Address, Engine, Shell, Wasm, check_engine_options, engine_options
from tokentrace.errors import InputError, QueryError


@app.command("query")
def query_command(
    queries_and_trace: list[str] = typer.Argument(
        ..., metavar="QUERY... TRACE",
        help="One or more queries (bundled name like kernel_summary or kernel_summary.sql, or "
             "a path to your own .sql), then the trace. All run on one load of the trace."),
    param: list[str] = typer.Option([], "--param", "-p", metavar="NAME=VALUE",
                                    help="Query parameter; repeat for several."),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o",
        help="File (.parquet, .csv, .json) for one query; a folder for several."),
    out_format: str = typer.Option("parquet", "--format",
                                   help="File format in a folder -o: parquet, csv, json."),
    engine: Engine = "embedded",
    shell: Shell = None,
    address: Address = None,
    wasm: Wasm = None,
    max_rows: int = typer.Option(40, "--max-rows", help="Rows printed without -o."),
    timeout: Optional[float] = typer.Option(
        None, "--timeout", min=0.001, metavar="SECONDS",
        help="Stop the queries once they have run this long (the load not counted); "
             "nothing is written then."),
) -> None:
    """Run queries on a trace: print a table, or write Parquet/CSV/JSON with -o."""
    from tokentrace.runtime.command import command

    with command(), user_errors():
        from tokentrace.catalog import find_query, open_trace, run_queries
        from tokentrace.catalog.headers import bundled_dir
        from tokentrace.catalog.params import parse_assignments
        from tokentrace.runtime.files import refuse_inputs

        if len(queries_and_trace) < 2:
            raise QueryError("give at least one QUERY and then the TRACE")
        *names, trace = queries_and_trace
        if Path(trace).is_dir():
            raise InputError(f"{trace}: is a folder; tokentrace query takes one trace file (a merged "
                             "trace, or a Proton, torch-profiler or VizTracer file). For a profile "
                             f"folder: tokentrace merge {trace} -o all.json --combine, then query "
                             f"all.json; or tokentrace analyze {trace} -o OUT (every query's rows "
                             "in OUT/tables/*.parquet)")
        specs = [find_query(name) for name in names]
        requests = _split_params(specs, parse_assignments(param))
        targets = _targets([spec.name for spec in specs], output, out_format)
        refuse_inputs(targets.values(), [Path(trace)])
        # Bundled queries end on their own; own SQL or a time limit needs the stop checks.
        own_sql = any(spec.path.resolve().parent != bundled_dir().resolve() for spec in specs)
        engine_choice = dataclasses.replace(engine_options(engine, wasm, shell, address),
                                            stoppable=own_sql or timeout is not None)
        check_engine_options(engine_choice)
        with open_trace(trace, engine_choice) as loaded:
            with loaded.time_limit(timeout):
                results = run_queries(loaded, requests)
            _emit(results, requests, loaded, targets, max_rows)


def _targets(names: list[str], output: Path | None, out_format: str) -> dict[str, Path]:
    """Each query's output file (none without ``-o``), known before the trace is loaded.

    Raises:
        QueryError: an unknown ``--format``.
    """
    from tokentrace.catalog.export import FORMATS

    if output is None:
        return {}
    suffix = f".{out_format.lower().lstrip('.')}"
    if suffix not in FORMATS:
        raise QueryError(f"--format {out_format!r}: choose parquet, csv or json")
    if len(names) == 1 and output.suffix:
        return {names[0]: output}
    return {name: output / f"{name}{suffix}" for name in names}


def _split_params(specs, given: dict[str, str]) -> list:
    """Gives each query the parameters it declares; a name no query declares is an error."""
    if len(specs) == 1:
        return [(specs[0], given)]
    declared = {p.name for spec in specs for p in spec.params}
    unknown = sorted(set(given) - declared)
    if unknown:
        valid = ", ".join(sorted(declared)) or "none"
        raise QueryError(f"no query here has parameter {', '.join(unknown)}; "
                         f"valid parameters: {valid}")
    return [(spec, {k: v for k, v in given.items() if spec.param(k)}) for spec in specs]


def _emit(results, requests, loaded, targets: dict[str, Path], max_rows) -> None:
    from tokentrace.catalog import effective_params
    from tokentrace.catalog.export import result_metadata, write_result

    params_by_name = {spec.name: params for spec, params in requests}
    specs = {spec.name: spec for spec, _ in requests}
    if not targets:
        for name, frame in results.items():
            _print_table(name, frame, max_rows, several=len(results) > 1)
        return
    for name, frame in results.items():
        target = targets[name]
        used = effective_params(specs[name], params_by_name[name])
        meta = result_metadata(str(specs[name].path), used, loaded.trace_path,
                               f"{loaded.backend}: {loaded.description}")
        write_result(frame, target, meta)
        typer.echo(f"{target}: {len(frame)} rows")


def _print_table(name: str, frame, max_rows: int, several: bool) -> None:
    from rich.console import Console

    console = Console(width=max(120, int(os.environ.get("COLUMNS", "0") or 0)))
    shown = frame.head(max_rows)
    cells = [[("" if _is_null(v) else _format(v)) for v in row]
             for row in shown.itertuples(index=False)]
    if _natural_width(frame.columns, cells) <= console.width:
        console.print(_wide_table(name if several else None, frame.columns, cells))
    else:  # too wide to read as columns: one block per row, like psql's expanded display
        for index, row in enumerate(cells, start=1):
            title = f"{name} row {index}" if several else f"row {index}"
            console.print(_expanded_table(title, frame.columns, row))
    hidden = len(frame) - max_rows
    console.print(f"{len(frame)} rows" + (f" ({hidden} not shown; use -o or --max-rows)"
                                          if hidden > 0 else ""))


def _natural_width(columns, cells) -> int:
    widths = [len(str(c)) for c in columns]
    for row in cells:
        widths = [max(w, len(v)) for w, v in zip(widths, row)]
    return sum(widths) + 3 * len(widths) + 1


def _wide_table(title, columns, cells):
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(str(column), overflow="fold")
    for row in cells:
        table.add_row(*row)
    return table


def _expanded_table(title, columns, row):
    from rich.table import Table

    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("column", style="bold")
    table.add_column("value", overflow="fold")
    for column, value in zip(columns, row):
        table.add_row(str(column), value)
    return table


def _is_null(value) -> bool:
    import pandas as pd

    # pd.isna covers None, NaN and pandas.NA; a list-like cell (never produced by SQL) is not null.
    return bool(pd.isna(value)) if pd.api.types.is_scalar(value) else False


def _format(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


@app.command("queries")
def queries_command(
    names: bool = typer.Option(False, "--names", help="Print only the names, one per line."),
) -> None:
    """List the bundled queries: name, what each answers, its parameters (durations in µs)."""
    with user_errors():
        from rich.console import Console
        from rich.table import Table

        from tokentrace.catalog import list_queries

        if names:
            for spec in list_queries():
                typer.echo(spec.name)
            return
        table = Table(show_lines=True)
        for title in ("query", "purpose", "parameters"):
            table.add_column(title, overflow="fold")
        for spec in list_queries():
            params = "\n".join(f"{p.describe()}: {p.doc}" for p in spec.params) or "-"
            table.add_row(spec.name, spec.purpose, params)
        Console(width=max(120, int(os.environ.get("COLUMNS", "0") or 0))).print(table)
