"""Issue 45, item 2: the folders that docs/recording.md's recipes make are found as written.

Each folder is laid out as the engine's own source names its files (the commits are in
docs/recording.md), with real torch-profiler traces from tests/data/peers as content: the
``cuda_event_sync`` trace (HTA's test data, rank 0, ``distributedInfo`` at the top, GPU kernels) with
its ``distributedInfo`` rewritten per rank, and the CPU-only gloo trace for vLLM's API server.

* vLLM before 0.13, ``VLLM_TORCH_PROFILER_DIR``: the workers' ``tensorboard_trace_handler`` names,
  ``<host>_<pid>.<ns>.pt.trace.json.gz`` (no worker name: ``gpu_worker.py`` at 0012cf69) or
  ``<instance_id>-rank-<r>.<ns>.pt.trace.json.gz`` (``worker_name`` set, as ``gpu_worker.py`` at
  35d5cda1 writes it under ``--profiler-config`` too), beside the API server's CPU-only
  ``<host>_<pid>.async_llm.<ns>.pt.trace.json.gz``. No name carries the rank: the traces'
  ``distributedInfo`` does (read since a46ae30; at 60c9ad8 these folders were refused).
* SGLang: ``profile_id`` is ``str(time.time())`` (``tokenizer_communicator_mixin.py`` at 40ef116f),
  a dotted number, in ``<profile_id>-TP-<t>.trace.json.gz`` (``scheduler_profiler_mixin.py`` at
  e9149048), beside the TokenizerManager's ``<profile_id>-host.trace.json.gz``.
"""

from __future__ import annotations

import gzip
import re
import warnings
from pathlib import Path

import pytest

from support.paths import DATA
from tokentrace.errors import TokentraceWarning
from tokentrace.sources.discover import GpuFormat, find_folder

pytestmark = pytest.mark.slow  # reads real (small) traces

PEERS = DATA / "peers"
GPU_TRACE = PEERS / "hta__critical_path__cuda_event_sync__event_sync_trace.json.gz"
CPU_TRACE = PEERS / "hta__cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
NS = 1_765_000_000_000_000_000  # time.time_ns() of tensorboard_trace_handler's names


def _trace(target: Path, rank: int | None = None, world: int = 2) -> Path:
    """A copy of the GPU trace as rank ``rank`` of ``world`` (``None``: the CPU-only trace)."""
    if rank is None:
        target.write_bytes(CPU_TRACE.read_bytes())
        return target
    text = gzip.decompress(GPU_TRACE.read_bytes()).decode()
    text, count = re.subn(r'"distributedInfo"\s*:\s*\{[^{}]*\}',
                          f'"distributedInfo": {{"rank": {rank}, "world_size": {world}}}', text, count=1)
    assert count == 1
    target.write_bytes(gzip.compress(text.encode()))
    return target


def _found(folder: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TokentraceWarning)
        return find_folder(folder)


@pytest.mark.parametrize("worker", ["node7_{pid}", "a1b2c-rank-{rank}"],
                         ids=["host_pid", "instance_rank"])
def test_vllm_before_0_13_folder(tmp_path, worker):
    workers = [worker.format(pid=4100 + r, rank=r) for r in (0, 1)]
    for rank, name in enumerate(workers):
        _trace(tmp_path / f"{name}.{NS + rank}.pt.trace.json.gz", rank)
    api_server = _trace(tmp_path / f"node7_4000.async_llm.{NS + 9}.pt.trace.json.gz")
    found = _found(tmp_path)
    assert [(str(r.tag), r.tag.global_rank, r.gpu_format) for r in found.ranks] == \
        [("TP0", 0, GpuFormat.KINETO), ("TP1", 1, GpuFormat.KINETO)]
    assert [r.gpu[0].name.split(".")[0] for r in found.ranks] == workers
    assert found.left_out == (api_server,)
    assert any("CPU-only" in w and api_server.name in w for w in found.warnings)


def test_vllm_two_profiler_runs_of_one_server_are_windows(tmp_path):
    # /start_profile and /stop_profile twice: each worker writes a second <ns> file
    for k, rank in [(0, 0), (1, 1), (2, 0), (3, 1)]:
        _trace(tmp_path / f"a1b2c-rank-{rank}.{NS + k}.pt.trace.json.gz", rank)
    found = _found(tmp_path)
    assert [r.gpu[0].name for r in found.ranks] == [f"a1b2c-rank-0.{NS + 2}.pt.trace.json.gz",
                                                    f"a1b2c-rank-1.{NS + 3}.pt.trace.json.gz"]
    assert sum("profiler windows of one process" in w for w in found.warnings) == 2


def test_sglang_time_profile_id(tmp_path):
    profile_id = "1765432100.1234567"  # str(time.time())
    for rank in (0, 1):
        _trace(tmp_path / f"{profile_id}-TP-{rank}.trace.json.gz", rank)
    _trace(tmp_path / f"{profile_id}-host.trace.json.gz")
    found = _found(tmp_path)
    assert [(r.profile_id, str(r.tag)) for r in found.ranks] == [(profile_id, "TP0"), (profile_id, "TP1")]
