"""Issue 48: a terminal's Ctrl+C reaches the whole process group, the local Dask cluster's
worker processes too. A worker that took it printed its own ``KeyboardInterrupt`` traceback
while tokentrace was already stopping it (2 runs in 110 of the signal stress benchmark). The
workers now start with SIGINT blocked: the command handles it, and stops them."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tokentrace.fleet import dask_executor

pytest.importorskip("distributed")
pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")


def _blocked_signals(status: str) -> int:
    return int(status.split("SigBlk:")[1].split()[0], 16)


def test_local_cluster_workers_leave_sigint_to_the_command():
    sigint = 1 << (signal.SIGINT - 1)
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    with dask_executor._client("dask") as (client, _where):
        # a function of this module would not unpickle there: the workers read their status
        statuses = client.run(Path("/proc/thread-self/status").read_text)
    masks = [_blocked_signals(status) for status in statuses.values()]
    assert masks and all(mask & sigint for mask in masks), masks
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before  # this process takes it as before
