"""The cores this process may use: how many workers a command starts by default."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (``taskset``, a batch scheduler's
    cpuset), capped by the CPU quotas of its cgroups (a container's ``--cpus``, a systemd or
    Slurm limit; cgroup v2 and v1); not the machine's count (on a 16-core host pinned to 2
    cores, 64 ranks were analysed by 16 workers at once: 3.7 GiB resident for 2 cores' work)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    return max(1, min(cores, quota) if quota else cores)


def _cgroup_cpu_quota() -> int | None:
    """The smallest CPU quota (whole cores, rounded up) on the process's cgroup paths and their
    parents; None without one (or off Linux)."""
    try:
        lines = open("/proc/self/cgroup", encoding="utf-8").read().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: cpu.max "QUOTA PERIOD" or "max PERIOD"
            files = [("/sys/fs/cgroup", "cpu.max")]
        elif "cpu" in controllers.split(","):  # v1: cpu.cfs_quota_us (-1: none), cfs_period_us
            files = [(f"/sys/fs/cgroup/{controllers}", "cpu.cfs_quota_us")]
        else:
            continue
        for root, name in files:
            parts = [part for part in path.split("/") if part]
            for depth in range(len(parts), -1, -1):  # the cgroup, then each parent
                folder = "/".join([root, *parts[:depth]])
                limits.append(_quota_cores(folder, name))
    found = [limit for limit in limits if limit]
    return min(found) if found else None


def _quota_cores(folder: str, name: str) -> int | None:
    try:
        if name == "cpu.max":
            quota, period = open(f"{folder}/cpu.max", encoding="ascii").read().split()[:2]
        else:
            quota = open(f"{folder}/cpu.cfs_quota_us", encoding="ascii").read().strip()
            period = open(f"{folder}/cpu.cfs_period_us", encoding="ascii").read().strip()
        if quota in ("max", "-1"):
            return None
        return max(1, -(-int(quota) // int(period)))
    except (OSError, ValueError):
        return None
