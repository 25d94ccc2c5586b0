"""Ranks found by content: torch-profiler traces whose names carry no rank (torch's
``tensorboard_trace_handler`` names, any ``*.json.gz``), told apart by ``distributedInfo``.

Real traces (HTA's test data, copied unchanged into tests/data/peers/disc_*): rank 0 of the
``cuda_event_sync`` trace (2023+ Kineto, ``distributedInfo`` at the top, exact idle 212000 ns), rank 1
of the 2022 ``inference_rank_1`` trace (``distributedInfo`` after the events), and a CPU-only gloo
rank 34 of 300. Two ranks of one world are made by rewriting ``distributedInfo`` in tmp copies.
"""

from __future__ import annotations

import gzip
import re
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from support.paths import DATA
from tokentrace.cli import app
from tokentrace.errors import DiscoveryError, TokentraceWarning
from tokentrace.sources.discover import discover, find_folder, pair_explicit
from tokentrace.sources.kineto_identity import handler_name, read_identity
from tokentrace.sources.kineto_ranks import is_candidate, kineto_ranks

pytestmark = pytest.mark.slow  # reads real (small) traces

PEERS = DATA / "peers"
SYNC = PEERS / "hta__critical_path__cuda_event_sync__event_sync_trace.json.gz"  # rank 0
OLD = PEERS / "hta__trace_file_list__inference_rank_1.json.gz"  # 2022, rank 1 at the end
CPU = PEERS / "hta__cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"  # gloo rank 34 of 300
NS = 1765000000000000000


def _copy(source: Path, target: Path, info: str | None = None) -> Path:
    """Copies a gzipped trace, replacing its ``distributedInfo`` object by ``info`` when given
    (``""``: the key removed)."""
    text = gzip.decompress(source.read_bytes()).decode()
    if info is not None:
        new = f'"distributedInfo": {info},' if info else ""
        text, count = re.subn(r'"distributedInfo"\s*:\s*\{[^{}]*\}\s*,', new, text, count=1)
        assert count == 1
    target.write_bytes(gzip.compress(text.encode()))
    return target


def _torch_name(worker: str, k: int) -> str:
    return f"{worker}.{NS + k}.pt.trace.json.gz"


def _world(folder: Path, ranks: int = 2, world: str = "") -> list[Path]:
    """``ranks`` GPU ranks of one world under torch's default names (one process each)."""
    return [_copy(SYNC, folder / _torch_name(f"node1_{100 + r}", r), f'{{"rank": {r}{world}}}')
            for r in range(ranks)]


def test_identity_from_the_head_and_from_the_end():
    sync, old, cpu = read_identity(SYNC), read_identity(OLD), read_identity(CPU)
    assert (sync.rank, sync.world_size, sync.has_gpu) == (0, None, True)
    assert (old.rank, old.world_size, old.has_gpu) == (1, None, True)  # 2022: found after the events
    assert read_identity(OLD, gpu=False).rank == 1
    assert (cpu.rank, cpu.world_size, cpu.has_gpu) == (34, 300, False)
    assert len(cpu.groups) == 11 and cpu.groups[0].desc == "default_pg" and cpu.groups[0].ranks == tuple(range(300))


def test_handler_names():
    assert handler_name(Path("h_12.1765000000000000001.pt.trace.json.gz")) == ("h_12", 1765000000000000001)
    assert handler_name(Path("h_12.async_llm.1765000000000000001.pt.trace.json")) == ("h_12.async_llm", 1765000000000000001)
    assert handler_name(Path("rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")) is None


def test_folder_of_torch_default_names_with_an_api_server(tmp_path):
    _world(tmp_path)
    _copy(CPU, tmp_path / _torch_name("node1_99.async_llm", 9))
    (tmp_path / "notes.json").write_text('{"a": 1}')
    found = find_folder(tmp_path)
    assert [str(r.tag) for r in found.ranks] == ["TP0", "TP1"]
    assert [r.tag.global_rank for r in found.ranks] == [0, 1]
    assert [r.gpu[0].name for r in found.ranks] == [_torch_name("node1_100", 0), _torch_name("node1_101", 1)]
    assert {r.profile_id for r in found.ranks} == {tmp_path.name}
    assert [p.name for p in found.left_out] == [_torch_name("node1_99.async_llm", 9)]
    assert found.warnings == (
        f"{_torch_name('node1_99.async_llm', 9)}: a CPU-only torch-profiler trace (no GPU activity): left "
        "out of the GPU figures (an API server or a CPU rank records no kernels)",)
    assert find_folder(tmp_path) == found  # the same answer on a second scan
    with pytest.warns(TokentraceWarning, match="CPU-only"):
        assert discover(tmp_path) == list(found.ranks)


def test_only_cpu_only_traces_are_refused_in_one_line(tmp_path):
    _copy(CPU, tmp_path / _torch_name("node1_99.async_llm", 9))
    with pytest.raises(DiscoveryError, match=r"only CPU-only torch-profiler traces \(.*async_llm") as caught:
        discover(tmp_path)
    assert "\n" not in str(caught.value)


def test_windows_of_one_process_are_one_rank(tmp_path):
    paths = [_copy(SYNC, tmp_path / _torch_name("node1_100", k)) for k in (3, 1, 2)]
    found = find_folder(tmp_path)
    assert len(found.ranks) == 1
    rank = found.ranks[0]
    assert (str(rank.tag), rank.gpu[0]) == ("TP0", paths[0])  # the latest <ns>
    assert [p.name for p in rank.windows] == [paths[1].name, paths[2].name]
    assert re.match(r"rank 0: 3 profiler windows of one process \(.*\): analysing the latest, "
                    + re.escape(paths[0].name), found.warnings[0])


def test_two_processes_claiming_one_rank_are_refused(tmp_path):
    _copy(SYNC, tmp_path / _torch_name("node1_100", 1))
    _copy(SYNC, tmp_path / _torch_name("node2_100", 2))
    with pytest.raises(DiscoveryError, match="several torch-profiler traces claim rank 0"):
        discover(tmp_path)


def test_traces_of_different_worlds_are_refused(tmp_path):
    _copy(SYNC, tmp_path / "a.json.gz", '{"rank": 0, "world_size": 2}')
    _copy(SYNC, tmp_path / "b.json.gz", '{"rank": 1, "world_size": 8}')
    with pytest.raises(DiscoveryError, match=r"world size 2: a.json.gz; world size 8: b.json.gz"):
        discover(tmp_path)


def test_traces_without_distributed_info_are_numbered_by_name(tmp_path):
    _copy(SYNC, tmp_path / "b.json.gz", "")
    _copy(SYNC, tmp_path / "a.json.gz", "")
    assert is_candidate(tmp_path / "a.json.gz")  # by content: deviceProperties beside traceEvents
    found = find_folder(tmp_path)
    assert [(str(r.tag), r.gpu[0].name) for r in found.ranks] == [("TP0", "a.json.gz"), ("TP1", "b.json.gz")]
    assert found.warnings == ("no distributedInfo (rank) in 2 torch-profiler trace(s): numbered by file "
                              "name: a.json.gz -> TP0, b.json.gz -> TP1",)


def test_2022_trace_beside_a_2023_trace(tmp_path):
    """The 2022 trace carries its rank after the events (no top keys in its head: it is a
    candidate by its torch name)."""
    old = tmp_path / _torch_name("node1_101", 1)
    old.write_bytes(OLD.read_bytes())
    new = tmp_path / _torch_name("node1_100", 0)
    new.write_bytes(SYNC.read_bytes())
    assert is_candidate(old) and is_candidate(new)
    found = kineto_ranks([old, new], tmp_path)
    assert [(str(r.tag), r.trace) for r in found.ranks] == [("TP0", new), ("TP1", old)]
    assert found.warnings == () and found.left_out == ()


def test_explicit_traces_of_two_ranks_are_two_ranks(tmp_path):
    paths = _world(tmp_path, world=', "world_size": 2')
    with warnings.catch_warnings():
        warnings.simplefilter("error", TokentraceWarning)
        ranks = pair_explicit(paths)
    assert [(str(r.tag), r.gpu) for r in ranks] == [("TP0", (paths[0],)), ("TP1", (paths[1],))]
    assert [r.identity.world_size for r in ranks] == [2, 2]


def test_one_explicit_trace_takes_its_rank_from_distributed_info():
    (rank,) = pair_explicit([OLD])
    assert str(rank.tag) == "TP1" and rank.identity.rank == 1


def test_merge_combine_of_two_ranks(tmp_path):
    paths = _world(tmp_path)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["merge", "--combine", str(paths[0]), str(paths[1]), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "TP0: 4 kernels" in result.output and "TP1: 4 kernels" in result.output
    assert (out / f"{tmp_path.name}.merged.json").is_file()


def test_analyze_folder_of_torch_default_names(tmp_path):
    import pandas as pd

    folder = tmp_path / "profile"
    folder.mkdir()
    _world(folder)
    _copy(CPU, folder / _torch_name("node1_99.async_llm", 9))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["analyze", str(folder), "-o", str(out), "--no-plots"])
    assert result.exit_code == 0, result.output
    assert "a CPU-only torch-profiler trace (no GPU activity)" in result.output
    budget = pd.read_parquet(out / "tables" / "idle_budget.parquet")
    assert budget.groupby("rank")["active_idle_ns"].first().to_dict() == {"TP0": 212000, "TP1": 212000}


@pytest.mark.parametrize("size", [7, 100, 4096])
def test_identity_across_chunk_joints(monkeypatch, size):
    """distributedInfo and the first GPU category cut by any chunk joint are still found."""
    from tokentrace.sources import kineto_identity

    for path, want in ((CPU, (34, 300, False, 11)), (OLD, (1, None, True, 0))):
        blob = gzip.decompress(path.read_bytes())
        chunks = [blob[i:i + size] for i in range(0, len(blob), size)]
        monkeypatch.setattr(kineto_identity, "iter_chunks", lambda _p, c=chunks: iter(c))
        monkeypatch.setattr(kineto_identity, "read_head", lambda _p: b"")
        found = kineto_identity.read_identity(path)
        assert (found.rank, found.world_size, found.has_gpu, len(found.groups)) == want


def test_an_empty_trace_is_not_called_cpu_only(tmp_path):
    _world(tmp_path, ranks=1)
    (tmp_path / _torch_name("node1_5", 5)).write_bytes(gzip.compress(b"{}"))
    found = find_folder(tmp_path)
    assert found.left_out == ()  # kept: its reader says what is wrong with it
    assert [r.gpu[0].name for r in found.ranks] == [_torch_name("node1_100", 0), _torch_name("node1_5", 5)]
