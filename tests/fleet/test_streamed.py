"""Queries run while a folder is merged (`tokentrace.fleet.execute`, `open_for_batch`):
every table equals the one the plain order gives (merge, then load and query), with one engine
or two per rank, in this process or in workers; a failed merge raises its own error and leaves
no cache entry; the fork helper and the growing-file load on their own."""

from __future__ import annotations

import os
import threading
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest

from support.paths import DATA
from tokentrace.catalog import list_queries, open_trace
from tokentrace.engine import GrowingTrace
from tokentrace.errors import InputError
from tokentrace.merge.cache import MANIFEST
from tokentrace.notebook import open_analysis, open_for_batch
from tokentrace.runtime.processes import ForkedCall

BATCH = [(spec.name, spec.name, {}) for spec in list_queries()] + [
    ("stall_causes", "host_stall_profile", {"min_gap_us": 2000, "host_only": True})]


def _plain(folder: Path, cache: Path, jobs: int) -> dict[str, pd.DataFrame]:
    """The batch in the plain order: merged first (cached), then queried."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        open_analysis(folder, cache_dir=cache, jobs=jobs).close()
        with open_for_batch(folder, BATCH, cache_dir=cache, jobs=jobs) as trace:
            assert set(trace.seconds) == {"merge"}  # merged already: nothing rode on the merge
            return trace.run_many(BATCH)


@pytest.fixture(scope="module")
def plain_t39(tmp_path_factory):
    return _plain(DATA / "sample_t39_tp2", tmp_path_factory.mktemp("plain"), 2)


def _one_rank(tmp_path: Path) -> Path:
    folder = tmp_path / "one"
    folder.mkdir()
    for path in (DATA / "sample_t39_tp2").glob("sample-TP0.*"):
        (folder / path.name).symlink_to(path)
    return folder


def _assert_same(found: dict, expected: dict) -> None:
    assert list(found) == list(expected)
    for table, rows in expected.items():
        pd.testing.assert_frame_equal(found[table], rows, obj=table)


@pytest.mark.parametrize("jobs", [1, 2, 4])  # in process; a worker per rank; two engines per rank
@pytest.mark.slow
def test_tables_equal_the_plain_order(plain_t39, tmp_path, jobs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with open_for_batch(DATA / "sample_t39_tp2", BATCH, cache_dir=tmp_path, jobs=jobs) as trace:
            assert set(trace.seconds) == {"merge and queries"}  # queried while merged
            _assert_same(trace.run_many(BATCH), plain_t39)
            # the batch is returned once; a second run queries the merged files
            again = trace.run_many(BATCH[:2])
            _assert_same(again, {t: plain_t39[t] for t, _, _ in BATCH[:2]})
    assert any((entry / MANIFEST).is_file() for entry in tmp_path.iterdir())
    # the entry is complete: a second open reuses it and queries it in the plain order
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with open_for_batch(DATA / "sample_t39_tp2", BATCH, cache_dir=tmp_path, jobs=jobs) as trace:
            assert set(trace.seconds) == {"merge"}
            _assert_same(trace.run_many(BATCH), plain_t39)


@pytest.mark.slow
def test_one_rank_split_after_its_load_and_without_fork(tmp_path):
    folder = _one_rank(tmp_path)
    expected = _plain(folder, tmp_path / "plain", 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # two jobs for one rank: loaded once here as it is merged, the queries in two processes
        with open_for_batch(folder, BATCH, cache_dir=tmp_path / "forked", jobs=2) as trace:
            _assert_same(trace.run_many(BATCH), expected)
        # another thread alive: no fork, merged then loaded in this process, the same rows
        stop = threading.Event()
        other = threading.Thread(target=stop.wait)
        other.start()
        try:
            with open_for_batch(folder, BATCH, cache_dir=tmp_path / "threaded", jobs=2) as trace:
                _assert_same(trace.run_many(BATCH), expected)
        finally:
            stop.set()
            other.join()


@pytest.mark.slow
def test_failed_merge_raises_its_error_and_leaves_no_entry(tmp_path):
    folder = _one_rank(tmp_path)
    viz = folder / "sample-TP0.viztracer.json.gz"
    broken = tmp_path / "broken.json"
    import gzip

    text = gzip.decompress(viz.read_bytes())
    broken.write_bytes(text[: len(text) // 2])  # cut in the middle of the events
    viz.unlink()
    (folder / "sample-TP0.viztracer.json").symlink_to(broken)
    old = os.stat(broken)
    os.utime(broken, (old.st_atime - 60, old.st_mtime - 60))  # not "being written"
    with pytest.raises(InputError) as plain:
        open_analysis(folder, cache_dir=tmp_path / "plain")
    for jobs in (1, 2):
        with pytest.raises(InputError) as streamed:
            open_for_batch(folder, BATCH, cache_dir=tmp_path / f"streamed{jobs}", jobs=jobs)
        assert str(streamed.value) == str(plain.value)
        assert not any(p.name == MANIFEST for p in (tmp_path / f"streamed{jobs}").rglob("*"))
        assert not [p for p in (tmp_path / f"streamed{jobs}").rglob("*.json")]


def test_bad_parameter_fails_before_merging(tmp_path):
    from tokentrace.errors import QueryError

    with pytest.raises(QueryError, match="min_gap_us must be >= 0"):
        open_for_batch(DATA / "sample_t39_tp2", [("gaps", "gpu_gaps", {"min_gap_us": -1})],
                       cache_dir=tmp_path)
    assert not any(tmp_path.rglob(MANIFEST))


def test_forked_call_line_result_error_and_death():
    with ForkedCall(lambda notify: (notify("first\nline"), 42)[1], "work") as child:
        assert child.line() == "first line"
        assert child.result() == 42
    with ForkedCall(lambda notify: 7, "work") as child:
        assert child.line() is None and child.result() == 7
    with ForkedCall(lambda notify: 1 / 0, "work") as child, pytest.raises(ZeroDivisionError):
        child.result()
    with ForkedCall(lambda notify: os._exit(3), "dying work") as child:
        with pytest.raises(InputError, match="dying work: the process doing it exited with status 3"):
            child.result()
    # the body raises: the child is killed and reaped before the exception leaves the block
    with pytest.raises(RuntimeError), ForkedCall(lambda notify: time.sleep(60), "slow") as child:
        pid = child._pid
        raise RuntimeError("give up")
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def test_a_forked_child_keeps_its_inherited_objects_out_of_the_collector():
    import gc

    from tokentrace.runtime.processes import frozen_for_fork

    assert gc.get_freeze_count() == 0
    with ForkedCall(lambda notify: gc.get_freeze_count(), "work") as child:
        assert child.result() > 1000  # this process's objects, frozen in the child
    assert gc.get_freeze_count() == 0  # and given back here
    gc.freeze()  # frozen before (as analyze does): they stay frozen
    try:
        with frozen_for_fork():
            pass
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


class _Writer:
    """A trace written piece by piece by a thread while the engine follows it."""

    def __init__(self, source: bytes, target: Path, fail: bool = False) -> None:
        self.source, self.target, self.fail = source, target, fail
        self.done = threading.Event()
        target.write_bytes(b"")
        self.thread = threading.Thread(target=self._write)
        self.thread.start()

    def _write(self) -> None:
        with self.target.open("ab") as out:
            step = len(self.source) // 7 + 1
            for start in range(0, len(self.source), step):
                if self.fail and start > len(self.source) // 2:
                    break
                out.write(self.source[start:start + step])
                out.flush()
                time.sleep(0.02)
        self.done.set()

    def wait(self) -> bool:
        finished = self.done.wait(0.005)
        if finished and self.fail:
            raise InputError("the writer failed")
        return not finished


@pytest.mark.slow
def test_growing_file_loads_like_the_whole_file(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with open_analysis(DATA / "sample_t39_tp2", cache_dir=tmp_path / "m") as trace:
            merged = trace.merged.ranks[0][1]
    source = merged.read_bytes()
    writer = _Writer(source, tmp_path / "growing.json")
    with open_trace(GrowingTrace(tmp_path / "growing.json", writer, len(source)), warn=False) as grown:
        writer.thread.join()
        assert grown.load.bytes_fed == len(source)
        with open_trace(merged, warn=False) as whole:
            sql = "SELECT COUNT(*) AS n, SUM(ts) AS t, SUM(dur) AS d FROM slice"
            assert grown.query(sql).equals(whole.query(sql))
    failing = _Writer(source, tmp_path / "failing.json", fail=True)
    with pytest.raises(InputError, match="the writer failed"):
        open_trace(GrowingTrace(tmp_path / "failing.json", failing, len(source)), warn=False)
    failing.thread.join()


@pytest.mark.slow
def test_failed_load_raises_its_error_and_keeps_the_entry(tmp_path):
    from tblib import pickling_support  # what Dask installs: exceptions pickled with their context

    from tokentrace.errors import EngineError
    from tokentrace.options import EngineOptions

    # the load's error has wasmtime's (ctypes pointers) as its context: the workers send it
    # back detached, or the pool would break instead of raising it
    pickling_support.install()

    bad = tmp_path / "bad.wasm"
    bad.write_text("not a module")
    engine = EngineOptions("embedded", wasm_path=bad)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with open_analysis(DATA / "sample_t39_tp2", cache_dir=tmp_path / "plain", engine=engine,
                           jobs=2) as trace, pytest.raises(EngineError) as plain:
            trace.run_many(BATCH)
        for jobs in (1, 2, 4):
            cache = tmp_path / f"streamed{jobs}"
            with pytest.raises(EngineError) as streamed:
                open_for_batch(DATA / "sample_t39_tp2", BATCH, cache_dir=cache, engine=engine,
                               jobs=jobs)
            assert str(streamed.value) == str(plain.value)
            # the merge itself succeeded: its entry is complete and is reused next time
            assert len(list(cache.glob(f"*/{MANIFEST}"))) == 1
            with open_for_batch(DATA / "sample_t39_tp2", BATCH, cache_dir=cache, jobs=jobs) as trace:
                assert set(trace.seconds) == {"merge"}
