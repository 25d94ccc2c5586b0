"""Perfetto ``QueryResult`` protos -> typed pandas DataFrames, column by column with numpy.

Each batch stores a cell-type per cell plus one array per type (varints, doubles, NUL-joined
strings, blobs) in cell order. A column whose cells are all integers becomes ``int64`` (``Int64``
when it holds NULLs), integers mixed with doubles become ``float64``, strings stay ``object``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

NULL, VARINT, FLOAT64, STRING, BLOB = 1, 2, 3, 4, 5


def _strings(raw: str | bytes) -> list[str]:
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    parts = raw.split("\0")
    return parts[:-1] if parts else []


def _column_values(types: np.ndarray, columns: np.ndarray, batch) -> list[dict]:
    """For one batch: per column, {cell_type: values} in row order."""
    per_type = {
        VARINT: np.asarray(batch.varint_cells, dtype=np.int64),
        FLOAT64: np.asarray(batch.float64_cells, dtype=np.float64),
        STRING: np.asarray(_strings(batch.string_cells), dtype=object),
        BLOB: np.asarray(list(batch.blob_cells), dtype=object),
    }
    column_count = int(columns.max()) + 1 if len(columns) else 0
    out: list[dict] = [dict() for _ in range(column_count)]
    for cell_type, values in per_type.items():
        mask = types == cell_type
        if not mask.any():
            continue
        owner = columns[mask]
        for column in np.unique(owner):
            out[column][cell_type] = values[owner == column]
    return out


def _build_column(types: np.ndarray, parts: dict) -> pd.Series | np.ndarray:
    """One column from its cell types (row order) and values per type."""
    present = set(np.unique(types).tolist()) - {NULL}
    has_null = bool((types == NULL).any())
    if present == {VARINT}:
        if not has_null:
            return parts[VARINT]
        out = pd.array(np.zeros(len(types), dtype=np.int64), dtype="Int64")
        out[types == VARINT] = parts[VARINT]
        out[types == NULL] = pd.NA
        return out
    if present and present <= {VARINT, FLOAT64}:
        out = np.full(len(types), np.nan)
        for cell_type in present:
            out[types == cell_type] = parts[cell_type]
        return out
    out = np.full(len(types), None, dtype=object)
    for cell_type in present:
        out[types == cell_type] = parts[cell_type]
    return out


def to_dataframe(result) -> pd.DataFrame:
    """Converts a complete ``QueryResult`` (all batches) to a DataFrame."""
    names = list(result.column_names)
    if not names:
        return pd.DataFrame()
    type_parts, value_parts = [], [dict() for _ in names]
    for batch in result.batch:
        types = np.asarray(batch.cells, dtype=np.int8)
        if not len(types):
            continue
        types = types.reshape(-1, len(names))
        columns = np.broadcast_to(np.arange(len(names)), types.shape).ravel()
        type_parts.append(types)
        for column, parts in enumerate(_column_values(types.ravel(), columns, batch)):
            for cell_type, values in parts.items():
                value_parts[column].setdefault(cell_type, []).append(values)
    if not type_parts:
        frame = pd.DataFrame({i: pd.Series([], dtype=object) for i in range(len(names))})
        frame.columns = names
        return frame
    all_types = np.concatenate(type_parts)
    data = {}
    for column in range(len(names)):
        parts = {t: np.concatenate(v) for t, v in value_parts[column].items()}
        data[column] = _build_column(all_types[:, column], parts)
    frame = pd.DataFrame(data)  # keyed by position: SQL may repeat a column name
    frame.columns = names
    return frame
