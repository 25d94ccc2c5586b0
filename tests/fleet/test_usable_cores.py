"""``analyze``'s default ``--jobs``: the cores the process may use, not the machine's count
(a 16-core host pinned to 2 cores would otherwise start 16 workers)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tokentrace.options import AnalyzeOptions
from tokentrace.runtime.cores import usable_cores


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_the_default_follows_the_cpu_affinity():
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from tokentrace.options import AnalyzeOptions; from tokentrace.runtime.cores import usable_cores; "
            "print(usable_cores(), AnalyzeOptions().query_jobs())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["1", "1"]


def test_an_explicit_jobs_wins():
    assert AnalyzeOptions(jobs=3).query_jobs() == 3
    assert 1 <= usable_cores() <= (os.cpu_count() or 1)


@pytest.mark.parametrize("files, cores", [
    ({"cpu.max": "150000 100000\n"}, 2), ({"cpu.max": "max 100000\n"}, None),
    ({"cpu.max": "50000 100000\n"}, 1),
    ({"cpu.cfs_quota_us": "400000\n", "cpu.cfs_period_us": "100000\n"}, 4),
    ({"cpu.cfs_quota_us": "-1\n", "cpu.cfs_period_us": "100000\n"}, None),
])
def test_a_cgroup_quota_is_read_as_whole_cores(tmp_path, files, cores):
    from tokentrace.runtime.cores import _quota_cores

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    name = "cpu.max" if "cpu.max" in files else "cpu.cfs_quota_us"
    assert _quota_cores(str(tmp_path), name) == cores
