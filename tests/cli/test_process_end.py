"""The console script ends without the interpreter's teardown (``tokentrace.cli.end_process``):
what a user sees of the process must be what the usual exit gives. Each case runs the real
entry point in a subprocess, its output to a pipe (block-buffered, so an unflushed stream would
lose its end)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tokentrace.catalog import list_queries


def _run(prelude: str, *args: str) -> subprocess.CompletedProcess:
    code = prelude + "\nfrom tokentrace.cli import main; main()"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # buffered, as by default
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_output_is_flushed_and_status_kept():
    done = _run("", "queries")
    assert done.returncode == 0, done.stderr
    assert all(spec.name in done.stdout for spec in list_queries())


def test_exit_functions_run_after_the_command():
    done = _run("import atexit; atexit.register(print, 'exit function ran')", "queries")
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("exit function ran")


def test_an_error_keeps_its_status_and_line(tmp_path):
    done = _run("", "query", "gpu_gaps.sql", str(tmp_path / "missing.json"))
    assert done.returncode == 1
    assert done.stderr.count("error:") == 1 and "missing.json" in done.stderr


def test_a_usage_error_keeps_click_status():
    done = _run("", "merge", "--no-such-option")
    assert done.returncode == 2
    assert "No such option" in done.stderr


@pytest.mark.parametrize("daemon", [False, True])
def test_a_running_thread_is_waited_for_unless_daemon(daemon):
    sleep_s = 60 if daemon else 0.5  # a daemon thread is left behind long before it would print
    prelude = ("import threading, time\n"
               f"threading.Thread(target=lambda: (time.sleep({sleep_s}), print('thread done', flush=True)), "
               f"daemon={daemon}).start()")
    done = _run(prelude, "queries")
    assert done.returncode == 0, done.stderr
    assert ("thread done" in done.stdout) is not daemon
