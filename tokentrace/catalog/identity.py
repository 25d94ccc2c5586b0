"""The rank identity: the columns ``rank, dp, pp, cp, tp, dcp, ep, stage`` that every per-rank
table carries, added in one place.

A query returns ``rank`` and its own columns; the runner (:mod:`.run`) adds the rank's parallel
coordinates and profiling stage right after ``rank`` (:func:`with_rank_identity`), read from
``tt_ranks`` (module ``tokentrace.ranks``) in the same engine, as Perfetto's
``BatchTraceProcessor.execute_and_flatten`` adds each trace's metadata to its rows. A cross-rank
query's map rows get them too (its reduce sorts ranks by them), and its result, when it has a
``rank`` column, gets them from those map rows: ``tokentrace query`` on a combined trace and
``analyze`` on per-rank traces give the same columns. A table without ``rank`` (one row per
collective or step, spanning ranks) gets none.

The columns' types and docs are ``tt_ranks``' own: a query's declared columns
(:attr:`~tokentrace.catalog.headers.QuerySpec.columns`) list them after ``rank``
(:func:`with_identity_fields`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tokentrace.catalog.functions import Field, table_columns
from tokentrace.errors import QueryError

#: The identity columns, in their order at the front of every per-rank table.
RANK_IDENTITY = ("rank", "dp", "pp", "cp", "tp", "dcp", "ep", "stage")
_ADDED = RANK_IDENTITY[1:]
#: What the runner reads the identity from, in the engine that ran the query (one row per rank).
IDENTITY_SQL = ("INCLUDE PERFETTO MODULE tokentrace.ranks;\n"
                f"SELECT {', '.join(RANK_IDENTITY)} FROM tt_ranks")


def with_rank_identity(rows: pd.DataFrame, identity: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with the identity columns right after ``rank``: the one place they are added.

    A column of those names that ``rows`` holds already keeps its values and moves there; the
    others take the values of the row's rank in ``identity`` (rows with ``rank`` and identity
    columns: :data:`IDENTITY_SQL`'s, or a cross-rank query's map rows; NULL for a rank it lacks),
    typed as the engine types a result's column (``int64``, ``Int64`` with NULLs, text, ``object``
    when all NULL). Rows without a ``rank`` column are returned as they are.
    """
    names = list(rows.columns)
    if "rank" not in names:
        return rows
    at = names.index("rank")
    own = {name: names.index(name) for name in _ADDED if name in names}
    missing = [name for name in _ADDED if name not in own]
    if missing:
        known = identity.drop_duplicates("rank") if "rank" in identity.columns else pd.DataFrame({"rank": []})
        codes, keys = pd.factorize(rows.iloc[:, at].astype(object), use_na_sentinel=False)
        rows = rows.assign(**{name: _values(keys, codes, known, name) for name in missing})
        own.update({name: len(names) + i for i, name in enumerate(missing)})
    moved = set(own.values())
    order = ([i for i in range(at + 1) if i not in moved] + [own[name] for name in _ADDED]
             + [i for i in range(at + 1, len(names)) if i not in moved])
    return rows.iloc[:, order]


def _values(keys, codes: np.ndarray, identity: pd.DataFrame, name: str):
    """Column ``name`` of ``identity`` for each row, the rows' ranks factorized (``keys[codes]``)."""
    per_rank = dict(zip(identity["rank"], identity[name])) if name in identity.columns else {}
    values = [_plain(per_rank.get(key)) for key in keys]
    table = np.empty(len(values), dtype=object)
    table[:] = values
    picked = table[codes]
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, int) for v in present):
        return pd.array(picked, dtype="Int64") if len(present) < len(values) else picked.astype(np.int64)
    return picked


def _plain(value):
    """A cell as the engine gives it: None for NULL, Python ints for integers (a float that
    holds one, as a reduce's SQLite may give, too), anything else as it is."""
    if value is None or (np.ndim(value) == 0 and pd.isna(value)):
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    return value


def with_identity_fields(columns: tuple[Field, ...], sources: list[str], where: str
                         ) -> tuple[Field, ...]:
    """A query's declared ``columns`` as its result has them: with ``rank``, the identity's
    declarations (``tt_ranks``' in ``sources``) right after it, a column of those names the
    query declares itself moved there; without ``rank``, as they are.

    Raises:
        QueryError: ``sources`` do not declare ``tt_ranks`` with the identity columns.
    """
    names = [c.name for c in columns]
    if "rank" not in names:
        return columns
    declared = {f.name: f for f in table_columns("tt_ranks", sources, where)}
    own = {c.name: c for c in columns if c.name in _ADDED}
    absent = [name for name in _ADDED if name not in own and name not in declared]
    if absent:
        raise QueryError(f"{where}: tt_ranks declares no column {', '.join(absent)}")
    at = names.index("rank")
    identity = [own.get(name) or declared[name] for name in _ADDED]
    return (*[c for c in columns[:at + 1] if c.name not in own], *identity,
            *[c for c in columns[at + 1:] if c.name not in own])
