"""Hostile inputs and the checks around them, for tests/robustness: edited copies of the real
sample rank, a real ``tokentrace`` subprocess that can be signalled, and the processes it left.

The edits are made on the bytes (``replace_once``), the way a broken writer or a user's editor
would leave a file, so the raw-copy scan sees exactly what Perfetto would.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from support.paths import DATA

SAMPLE = DATA / "sample_t39_tp2"
# The first X event of the sample's TP0 report and the first scope of its Proton trace: what
# the hostile edits replace (each occurs once before any other event of its kind).
VIZ_TS = b'"ts": 72271921.765'
PROTON_SCOPE_TS = b'"ts":73370.249'
CLI = [sys.executable, "-c", "from tokentrace.cli import main; main()"]
TAG_VARIABLE = "TOKENTRACE_TEST_TAG"


def age(path: Path, seconds: float = 10.0) -> Path:
    """Makes ``path`` look finished (not 'still being written')."""
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))
    return path


def aged_sample(tmp_path: Path) -> Path:
    """A copy of the sample profile folder whose files are old enough to count as finished."""
    folder = tmp_path / "profile"
    shutil.copytree(SAMPLE, folder)
    for path in folder.iterdir():
        age(path)
    return folder


def sample_rank(folder: Path, profile: str = "s", tag: str = "TP0", source: str = "TP0") -> tuple[Path, Path]:
    """Plain copies of the sample's rank ``source`` as ``<profile>-<tag>.*`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    viz = folder / f"{profile}-{tag}.viztracer.json"
    proton = folder / f"{profile}-{tag}.proton.chrome_trace"
    viz.write_bytes(gzip.decompress((SAMPLE / f"sample-{source}.viztracer.json.gz").read_bytes()))
    proton.write_bytes(gzip.decompress((SAMPLE / f"sample-{source}.proton.chrome_trace.gz").read_bytes()))
    return age(viz), age(proton)


def replace_once(path: Path, old: bytes, new: bytes) -> Path:
    """Replaces the first ``old`` in ``path`` (which must hold it) by ``new``."""
    data = path.read_bytes()
    assert old in data, (path, old)
    path.write_bytes(data.replace(old, new, 1))
    return age(path)


def small_rank(folder: Path, events: int = 3000) -> tuple[Path, Path]:
    """A small real rank: the sample TP0 report cut to its first ``events`` events (re-written
    as VizTracer writes it, metadata kept), with its Proton trace."""
    viz, proton = sample_rank(folder)
    doc = json.loads(viz.read_bytes())
    doc["traceEvents"] = doc["traceEvents"][:events]
    viz.write_text(json.dumps(doc))
    return age(viz), proton


def run_cli(*args, env: dict | None = None, timeout: float = 300, **kwargs) -> tuple[int, str]:
    """Runs ``tokentrace ARGS`` in a fresh process: (exit status, stderr stripped)."""
    done = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, **kwargs)
    return done.returncode, done.stderr.strip()


def one_error_line(code: int, err: str, *fragments: str) -> None:
    """Asserts exit 1 with one ``error:`` line holding every fragment (the stage lines that
    progress writes when stderr is no terminal, ``tokentrace: <stage>: <s> s``, aside)."""
    assert code == 1, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("tokentrace: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def tree(folder: Path) -> dict[str, bytes] | None:
    """Every file under ``folder`` with its bytes (None when the folder is absent)."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def tagged_processes(tag: str) -> list[int]:
    """Live processes whose environment carries ``tag`` (a command and every child it made,
    even re-parented ones)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"{TAG_VARIABLE}={tag}".encode() in environ and state != "Z":
            found.append(int(entry))
    return found


class Missed(Exception):
    """The command ended before the point to signal was seen (a loaded machine can keep the
    poller off the CPU for the whole of a short window): that run tested nothing."""


def signal_midway(args: list, sig: int, ready: Callable[[], bool], group: bool = False,
                  timeout: float = 120, attempts: int = 3) -> tuple[int, str, list[int]]:
    """Starts ``tokentrace ARGS``, sends ``sig`` once ``ready()`` holds (polled every 2 ms),
    waits for the end; returns (exit status, stderr, pids of its processes still alive 0.5 s
    after it ended). ``group``: to the whole process group, as a terminal does. A run that
    ended before it could be signalled is run again, its folder (``ready.folder``, from
    :func:`temp_file_in`) first put back as it was, up to ``attempts`` runs."""
    folder = getattr(ready, "folder", None)
    for _ in range(attempts):
        saved = _saved(folder)
        try:
            return _signal_once(args, sig, ready, group, timeout)
        except Missed:
            if folder is not None:  # as it was: absent, or the copy
                shutil.rmtree(folder, ignore_errors=True)
                if saved is not None:
                    shutil.copytree(saved, folder, symlinks=True)
        finally:
            if saved is not None:
                shutil.rmtree(saved)
    raise AssertionError(f"tokentrace {args[0]} ended {attempts} times before the point to signal")


def _signal_once(args: list, sig: int, ready: Callable[[], bool], group: bool,
                 timeout: float) -> tuple[int, str, list[int]]:
    tag = uuid.uuid4().hex
    process = subprocess.Popen([*CLI, *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env={**os.environ, TAG_VARIABLE: tag}, start_new_session=True)
    try:
        start = time.monotonic()
        while not ready():
            if process.poll() is not None:
                process.communicate()
                raise Missed
            assert time.monotonic() - start < timeout, "the command never reached the point to signal"
            time.sleep(0.002)
        if process.poll() is not None:  # ended between the two looks
            process.communicate()
            raise Missed
        if group:
            os.killpg(process.pid, sig)
        else:
            process.send_signal(sig)
        err = process.communicate(timeout=timeout)[1].decode()
    except BaseException:  # missed, never ready, or no end in time: nothing runs on
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        for pid in tagged_processes(tag):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        raise
    deadline = time.monotonic() + 0.5
    alive = tagged_processes(tag)
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = tagged_processes(tag)
    for pid in alive:  # never leave them behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    return process.returncode, err.strip(), alive


def _saved(folder: Path | None) -> Path | None:
    """A copy of ``folder`` beside it; None when there is no folder."""
    if folder is None or not folder.exists():
        return None
    saved = folder.with_name(folder.name + ".saved")
    shutil.copytree(folder, saved, symlinks=True)
    return saved


class temp_file_in:  # noqa: N801 - used as a function
    """``ready`` for :func:`signal_midway`: a temp file (holding ``part``) exists in ``folder``."""

    def __init__(self, folder: Path, part: str = "") -> None:
        self.folder, self.part = folder, part

    def __call__(self) -> bool:
        try:
            return any(p.name.endswith(".tmp") and self.part in p.name for p in self.folder.iterdir())
        except OSError:
            return False
