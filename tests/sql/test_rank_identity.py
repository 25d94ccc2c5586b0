"""One rank identity (issue 46): every per-rank table of the bundled queries starts with the same
columns, ``rank, dp, pp, cp, tp, dcp, ep, stage``, added by the runner from ``tt_ranks``
(tokentrace.catalog.identity), not declared by each query."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tokentrace.catalog import RANK_IDENTITY, list_queries, run_query
from tokentrace.catalog.identity import IDENTITY_SQL, with_rank_identity


def _same(left, right) -> bool:
    return (pd.isna(left) and pd.isna(right)) or left == right


def test_every_per_rank_table_carries_the_rank_identity(merged_t39):
    _, engine = merged_t39
    ranks = engine.query(IDENTITY_SQL).set_index("rank")
    per_rank = []
    for spec in list_queries():
        rows = run_query(engine, spec, {"min_gap_us": 50} if spec.param("min_gap_us") else {})
        declared = [c.name for c in spec.columns]
        if "rank" not in rows.columns:  # one row per collective or step, across ranks
            assert not set(RANK_IDENTITY) & set(rows.columns) and "rank" not in declared, spec.name
            continue
        per_rank.append(spec.name)
        assert tuple(rows.columns[:len(RANK_IDENTITY)]) == RANK_IDENTITY, spec.name
        assert tuple(declared[:len(RANK_IDENTITY)]) == RANK_IDENTITY, spec.name
        assert not set(RANK_IDENTITY) & set(rows.columns[len(RANK_IDENTITY):]), spec.name
        assert len(rows) > 0 or spec.name == "collective_wait", spec.name
        for row in rows[list(RANK_IDENTITY)].drop_duplicates("rank").itertuples(index=False):
            known = ranks.loc[row.rank]
            assert all(_same(getattr(row, c), known[c]) for c in RANK_IDENTITY[1:]), (spec.name, row)
        assert str(rows.tp.dtype) == "int64" and str(rows.dp.dtype) == "Int64", spec.name
    assert len(per_rank) == 13  # all but rank_skew and collective_skew


def test_raw_trace_and_own_query_get_the_identity(raw_proton_t39, tmp_path):
    own = tmp_path / "mine.sql"
    own.write_text("INCLUDE PERFETTO MODULE tokentrace.ranks;\n"
                   "SELECT rank, 7 AS answer, host_upid FROM tt_ranks;\n")
    rows = run_query(raw_proton_t39, own)
    assert list(rows.columns) == [*RANK_IDENTITY, "answer", "host_upid"]
    assert rows["rank"].tolist() == ["Trace"] and rows.stage.tolist() == [""]
    assert rows[list(RANK_IDENTITY[1:-1])].isna().all().all()  # a raw trace: no coordinates


def test_identity_is_placed_after_rank_and_keeps_a_query_s_own_columns():
    identity = pd.DataFrame({"rank": ["DP0-PP1-TP2-EP0", "TP1"], "dp": pd.array([0, None], "Int64"),
                             "pp": pd.array([1, None], "Int64"), "cp": [None, None],
                             "tp": [2, 1], "dcp": [None, None], "ep": pd.array([0, None], "Int64"),
                             "stage": ["DECODE", ""]})
    rows = pd.DataFrame({"x": [1, 2, 3], "rank": ["TP1", "DP0-PP1-TP2-EP0", "TP9"],
                         "stage": ["mine", "mine", "mine"], "y": [4.0, 5.0, 6.0]})
    out = with_rank_identity(rows, identity)
    assert list(out.columns) == ["x", *RANK_IDENTITY, "y"]
    assert out.stage.tolist() == ["mine"] * 3  # the query's own column, moved
    assert out.pp.tolist() == [pd.NA, 1, pd.NA] and str(out.pp.dtype) == "Int64"  # TP9: unknown
    assert out.tp.tolist() == [1, 2, pd.NA] and out.cp.tolist() == [None] * 3  # all NULL: object
    one = with_rank_identity(rows.iloc[:2], identity)
    assert one.tp.dtype == np.int64  # no NULL: plain int64, as the engine types it
    assert with_rank_identity(rows.drop(columns="rank"), identity).equals(rows.drop(columns="rank"))
