"""Issue 31, who can read a trace: ``tokentrace analyze -o OUT`` on traces only their owner can
read (0600 in a 0700 folder) writes nothing that others can read, whatever the umask (022), also
into an output folder that already exists and others can enter (``-o .`` in a shared project
folder, a results folder made beforehand). The figures hold what the tables hold (host function
and kernel names, timings): they are held to the inputs' permissions like the report and the
tables."""

from __future__ import annotations

import os
import stat

import pytest

from support.hostile import age, run_cli, small_rank

# Runs `tokentrace analyze` on a small real rank: out of the quick run (tests/conftest.py).
pytestmark = pytest.mark.slow


def _umask_022() -> None:
    os.umask(0o022)


def test_analyze_of_private_traces_writes_nothing_others_can_read(tmp_path):
    folder = tmp_path / "profile"
    for path in small_rank(folder, events=20000):
        os.chmod(path, 0o600)
        age(path)
    os.chmod(folder, 0o700)
    out = tmp_path / "results"
    out.mkdir(mode=0o755)  # made beforehand, as a user's results folder is
    os.chmod(out, 0o755)
    code, err = run_cli("analyze", folder, "-o", out, preexec_fn=_umask_022, timeout=600)
    assert code == 0, err
    written = [p for p in out.rglob("*")]
    assert any(p.suffix == ".svg" for p in written)  # the figures were drawn: they count here
    open_to_others = {str(p.relative_to(out)): oct(stat.S_IMODE(p.lstat().st_mode)) for p in written
                      if stat.S_IMODE(p.lstat().st_mode) & 0o077}
    assert open_to_others == {}  # before: plots/ 0755 and every figure 0644, the rest 0600 / 0700
