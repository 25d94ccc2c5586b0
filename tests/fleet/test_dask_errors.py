"""`analyze --executor dask://...` when the cluster is not there, does not answer, or is lost
mid-run (issue 31): one `error:` line naming what was lost, exit 1, within a bounded time, the
previous report's files as they were, no process left. A real scheduler and worker run as
subprocesses, killed with SIGKILL while they map the sample's ranks."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from support.hostile import CLI, SAMPLE, TAG_VARIABLE, one_error_line, tagged_processes, tree
from tokentrace.fleet import dask_executor

pytest.importorskip("distributed")

RUN_TIMEOUT_S = 60  # the old code hung for ever here: the bound makes that a failure


@pytest.fixture
def previous(analyzed_t39, tmp_path) -> Path:
    """An earlier successful analyze's output folder (its merge cached: no merge again)."""
    assert analyzed_t39.exit_code == 0, analyzed_t39.stdout
    out = tmp_path / "out"
    shutil.copytree(analyzed_t39.output, out)
    return out


@dataclasses.dataclass
class Cluster:
    address: str
    scheduler: subprocess.Popen
    worker: subprocess.Popen


@pytest.fixture
def cluster(tmp_path):
    """A Dask scheduler and one single-threaded worker without a nanny (killed, it stays dead),
    started at once (the worker finds the scheduler through its file)."""
    file = tmp_path / "scheduler.json"
    dask = [sys.executable, "-m", "dask"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "start_new_session": True}
    scheduler = subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0",
                                  "--no-dashboard", "--scheduler-file", str(file)], **quiet)
    worker = subprocess.Popen([*dask, "worker", "--scheduler-file", str(file), "--nthreads", "1",
                               "--no-nanny", "--no-dashboard", "--host", "127.0.0.1"], **quiet)
    try:
        deadline = time.monotonic() + 30
        while not (file.is_file() and file.stat().st_size):
            assert time.monotonic() < deadline and scheduler.poll() is None, "no scheduler"
            time.sleep(0.05)
        yield Cluster(json.loads(file.read_text())["address"], scheduler, worker)
    finally:
        for process in (worker, scheduler):
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait(10)


def _analyze(out: Path, executor: str) -> list[str]:
    return [*CLI, "analyze", str(SAMPLE), "-o", str(out), "--no-plots", "--executor", executor]


def _run_and_kill(out: Path, cluster: Cluster, victim: subprocess.Popen) -> tuple[int, str, list[int]]:
    """Runs analyze on ``cluster``, SIGKILLs ``victim`` once a rank has been mapping for four
    of the command's looks at the cluster; (exit status, stderr, its processes still alive 0.5 s after it ended)."""
    from distributed import Client

    tag = uuid.uuid4().hex
    process = subprocess.Popen(_analyze(out, "dask://" + cluster.address.removeprefix("tcp://")),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, TAG_VARIABLE: tag})
    try:
        with Client(cluster.address, timeout=10, set_as_default=False) as watcher:
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while not any(str(k).startswith("tokentrace-map-")
                          for keys in watcher.processing().values() for k in keys):
                assert time.monotonic() < deadline and process.poll() is None, "no rank was mapped"
                time.sleep(0.05)
        time.sleep(4 * dask_executor.POLL_S)  # the command has looked at who maps what by now
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        err = process.communicate(timeout=RUN_TIMEOUT_S)[1]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    deadline = time.monotonic() + 0.5
    alive = tagged_processes(tag)
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = tagged_processes(tag)
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    return process.returncode, err.strip(), alive


def test_nothing_listening_is_one_error_line(previous):
    before = tree(previous)
    with socket.socket() as bound:  # bound, never listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        start = time.monotonic()
        done = subprocess.run(_analyze(previous, f"dask://127.0.0.1:{port}"), capture_output=True,
                              text=True, timeout=RUN_TIMEOUT_S)
    one_error_line(done.returncode, done.stderr.strip(), f"tcp://127.0.0.1:{port}",
                   "no Dask scheduler", "start one there")
    assert time.monotonic() - start < 20  # the old code retried for 30 s, then a traceback
    assert tree(previous) == before


def test_a_listener_that_never_answers_times_out(previous, monkeypatch):
    from typer.testing import CliRunner

    from tokentrace.cli import app

    monkeypatch.setattr(dask_executor, "CONNECT_TIMEOUT_S", 1.0, raising=False)
    before, threads = tree(previous), threading.active_count()
    outcome = []
    with socket.socket() as silent:  # the kernel accepts the connection; nothing ever answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        args = ["analyze", str(SAMPLE), "-o", str(previous), "--no-plots", "--executor", f"dask://127.0.0.1:{port}"]
        run = threading.Thread(target=lambda: outcome.append(CliRunner().invoke(app, args)), daemon=True)
        start = time.monotonic()
        run.start()
        run.join(RUN_TIMEOUT_S)
    assert outcome, "analyze hung on a listener that never answers"
    assert time.monotonic() - start < 15
    result = outcome[0]
    one_error_line(result.exit_code, result.stderr.strip(), f"tcp://127.0.0.1:{port}",
                   "no Dask scheduler answered within 1 s")
    assert tree(previous) == before
    deadline = time.monotonic() + 5
    while threading.active_count() > threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() == threads, threading.enumerate()  # no thread left behind


def test_a_worker_killed_mid_run_is_one_error_line(previous, cluster):
    before = tree(previous)
    code, err, alive = _run_and_kill(previous, cluster, cluster.worker)
    one_error_line(code, err, "its worker tcp://127.0.0.1:", "was lost while it mapped", "TP0")
    assert not alive, alive
    assert tree(previous) == before


def test_the_scheduler_killed_mid_run_is_one_error_line(previous, cluster):
    before = tree(previous)
    code, err, alive = _run_and_kill(previous, cluster, cluster.scheduler)
    one_error_line(code, err, cluster.address, "connection to the scheduler was lost")
    assert not alive, alive
    assert tree(previous) == before
