"""Query results to files: Parquet (typed, with metadata), CSV, JSON. Writes are atomic.

Parquet keeps integer nanoseconds as int64, NULLs as nulls (pandas ``Int64`` columns become
nullable int64), and carries the provenance in the schema metadata under the key ``tokentrace``:
``{"query", "parameters", "trace", "engine", "tool_version"}`` as JSON; ``parameters`` holds the
values used under the parameters' names, in their units (``{"min_gap_us": 100}`` is 100 µs, the
100000 ns the SQL received as the argument ``min_gap_ns``). JSON output is
``{"metadata": {...}, "rows": [{column: value}, ...]}``; CSV has the rows only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from tokentrace.errors import InputError
from tokentrace.runtime.files import atomic_path

FORMATS = (".parquet", ".csv", ".json")
METADATA_KEY = b"tokentrace"


def result_metadata(query: str, parameters: dict, trace: Path | str | None,
                    engine: str) -> dict:
    """The provenance block written with every result.

    Args:
        query: the query's name or path.
        parameters: the values used, as :func:`tokentrace.catalog.effective_params` gives them
            (durations ``*_us`` in µs); values other than str/int/float/bool/None become text.
        trace: the trace file, or None.
        engine: which engine ran the query, in words.
    """
    from tokentrace.version import tool_version
    return {"query": query, "parameters": {k: _plain(v) for k, v in parameters.items()},
            "trace": str(trace) if trace is not None else None, "engine": engine,
            "tool_version": tool_version()}


def _plain(value):
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def write_result(frame: pd.DataFrame, path: str | os.PathLike, metadata: dict) -> Path:
    """Writes ``frame`` to ``path`` in the format its suffix names; returns the path.

    Raises:
        InputError: unknown suffix, or the file cannot be written.
    """
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in FORMATS:
        raise InputError(f"{target}: cannot tell the output format; use a name ending in "
                         f"{', '.join(FORMATS)}")
    writer = {".parquet": _write_parquet, ".csv": _write_csv, ".json": _write_json}[suffix]
    with atomic_path(target) as temp:
        writer(frame, temp, metadata)
    return target


def arrow_table(frame: pd.DataFrame, metadata: dict):
    """The pyarrow Table for ``frame``: int64/float64/string columns, nulls kept."""
    import pyarrow as pa
    table = pa.Table.from_pandas(frame, preserve_index=False)
    fields = [_string_if_null(field) for field in table.schema]
    table = table.cast(pa.schema(fields))
    meta = dict(table.schema.metadata or {})
    meta.pop(b"pandas", None)  # pandas' own block pins pandas dtypes; ours is portable
    meta[METADATA_KEY] = json.dumps(metadata, sort_keys=True).encode()
    return table.replace_schema_metadata(meta)


def _string_if_null(field):
    import pyarrow as pa
    # A column NULL on every row has no type; the documented type is text or a number, and
    # a null-typed column trips many readers, so make it a nullable string.
    return pa.field(field.name, pa.string()) if pa.types.is_null(field.type) else field


def _write_parquet(frame: pd.DataFrame, path: Path, metadata: dict) -> None:
    import pyarrow.parquet as pq
    pq.write_table(arrow_table(frame, metadata), path)


def _write_csv(frame: pd.DataFrame, path: Path, _metadata: dict) -> None:
    frame.to_csv(path, index=False)


def _write_json(frame: pd.DataFrame, path: Path, metadata: dict) -> None:
    rows = json.loads(frame.to_json(orient="records"))
    with path.open("w", encoding="utf-8") as handle:
        json.dump({"metadata": metadata, "rows": rows}, handle, indent=1)
        handle.write("\n")


def read_metadata(path: str | os.PathLike) -> dict:
    """The ``tokentrace`` metadata of a Parquet file written by :func:`write_result`."""
    import pyarrow.parquet as pq
    meta = pq.read_schema(path).metadata or {}
    return json.loads(meta.get(METADATA_KEY, b"{}"))
