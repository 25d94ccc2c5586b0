"""The per-rank map and cross-rank reduce (`tokentrace.fleet`) against the combined file: every
bundled query gives the same table, value for value and type for type, whether the ranks are
loaded one by one (each in its own trace processor) or together in one combined trace."""

from __future__ import annotations

import gzip
import re
import shutil
import warnings

import pandas as pd
import pytest

from support.hostile import age
from support.paths import DATA, SHARED_TRACES
from tokentrace.catalog import list_queries, open_trace, run_query
from tokentrace.catalog.reduce import reduce_rows, split_sql
from tokentrace.errors import QueryError
from tokentrace.fleet import QueryRequest, RankSet, rank_traces
from tokentrace.merge.pipeline import merge
from tokentrace.options import MergeOptions

REQUESTS = [QueryRequest(spec.name, spec.name) for spec in list_queries()]


def _merged(folder, out):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return merge([folder], out, MergeOptions(combine=True))


def _combined_tables(path) -> dict[str, pd.DataFrame]:
    with open_trace(path, warn=False) as engine:
        return {r.table: run_query(engine, r.query) for r in REQUESTS}


def _other_host(tmp_path):
    """sample_t39_tp2 with TP1's two anchors 5 ms later, as on a host whose clock differs: TP1
    is shifted (map) and rewritten (combined file), TP0 is not."""
    folder = shutil.copytree(DATA / "sample_t39_tp2", tmp_path / "in")
    for name in ("sample-TP1.viztracer.json.gz", "sample-TP1.proton.chrome_trace.gz"):
        data = gzip.decompress((folder / name).read_bytes())
        data = re.sub(rb'("baseTimeNanoseconds":\s*)([0-9]+)',
                      lambda m: m.group(1) + str(int(m.group(2)) + 5_000_000).encode(), data, count=1)
        (folder / name).write_bytes(gzip.compress(data))
        age(folder / name)
    return folder


@pytest.mark.parametrize("name, shifts", [("sample_t39_tp2", [0, 0]), ("t36_tp2", [0, 0]),
                                          ("other_host", [0, 5_000_001])])  # its anchors were 1 ns apart
@pytest.mark.slow
def test_per_rank_tables_equal_the_combined_files(name, shifts, tmp_path):
    folder = _other_host(tmp_path) if name == "other_host" else (SHARED_TRACES if name == "t36_tp2" else DATA) / name
    if not folder.is_dir():
        pytest.skip(f"{folder} not present")
    result = _merged(folder, tmp_path)
    traces = rank_traces(result.ranks)
    # one host: the ranks' anchors agree to a few ns, so no rank is shifted
    assert [t.rank for t in traces] == ["TP0", "TP1"] and [t.shift_ns for t in traces] == shifts
    done = []
    tables = RankSet(traces, jobs=2, progress=done.append).run(REQUESTS)
    assert sorted(done) == ["TP0", "TP1"]
    expected = _combined_tables(result.combined)
    for request in REQUESTS:
        pd.testing.assert_frame_equal(tables[request.table], expected[request.table], obj=request.table)
    # cross-rank rows are there: both ranks meet in the reduce
    assert (tables["rank_skew"].n_ranks == 2).all() and len(tables["collective_skew"]) >= 40
    assert len(tables["collective_wait"]) >= 1 and tables["collective_wait"].wait_ns.min() > 0


@pytest.mark.slow
def test_dask_executor_gives_the_local_tables(tmp_path):
    pytest.importorskip("distributed")
    result = _merged(DATA / "sample_t39_tp2", tmp_path)
    traces = rank_traces(result.ranks)
    requests = [QueryRequest(name, name) for name in ("gpu_gaps", "gap_causes", "rank_skew", "collective_wait")]
    local = RankSet(traces).run(requests)
    on_dask = RankSet(traces, executor="dask").run(requests)
    for request in requests:
        pd.testing.assert_frame_equal(on_dask[request.table], local[request.table], obj=request.table)


def test_reduce_runs_in_sqlite_over_the_map_rows():
    map_sql, reduce_sql = split_sql("SELECT 1 AS x\n-- @reduce\nSELECT SUM(x) AS total FROM map")
    assert map_sql.strip() == "SELECT 1 AS x" and "SUM(x)" in reduce_sql
    rows = pd.DataFrame({"x": [1, 2, None]})
    assert reduce_rows("q", reduce_sql, rows).total.tolist() == [3]
    assert split_sql("SELECT 1") == ("SELECT 1", "")
    with pytest.raises(QueryError, match="the reduce .SQLite. failed"):
        reduce_rows("q", "SELECT nope FROM map", rows)
    with pytest.raises(QueryError, match="at most one"):
        split_sql("SELECT 1\n-- @reduce\nSELECT 2\n-- @reduce\nSELECT 3")
