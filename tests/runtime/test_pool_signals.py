"""A pool worker must let the stop signals through: the workers are forked while the parent
holds them back (``signals_held``), and a worker that inherited that mask kept a SIGTERM from
its parent pending until its task ended (analyze's Ctrl-C took the whole run, or the pool's
grace time, to end)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tokentrace.runtime.processes import pool
from tokentrace.runtime.signals import STOP_SIGNALS

pytestmark = pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX masks")


def _blocked_stop_signals() -> list[int]:
    return sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []) if s in STOP_SIGNALS)


def _busy(seconds: float) -> int:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return os.getpid()


def test_a_worker_runs_with_the_stop_signals_let_through():
    with pool(2, "a worker died") as workers:
        (future,) = workers.submit([(_blocked_stop_signals,)])
        assert future.result(timeout=30) == []


def test_a_signal_to_the_parent_ends_a_busy_pool_at_once():
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with pool(2, "a worker died") as workers:
            futures = workers.submit([(_busy, 30.0), (_busy, 30.0)])
            time.sleep(0.5)
            signal.raise_signal(signal.SIGINT)
            for future in futures:
                future.result()
    # each worker unwinds its task at the SIGTERM end_pool sends; before, they ran on until
    # the pool's 10 s grace time was out
    assert time.monotonic() - started < 5.0
    # and no thread of the pool outlives it: a live thread turns every later fork off
    assert threading.active_count() == 1, threading.enumerate()
