"""`tokentrace view` under the one cleanup path of the commands (tokentrace.runtime.command): a real
`tokentrace view` process on the real sample traces, signalled (SIGTERM, SIGINT, SIGHUP) while it
merges the profile folder, while it annotates the cache entry in place, while it writes an
annotated copy, and while it serves. Preparing, a signal is one `error:` line and 128 + the
signal, and leaves no temp file, no partial cache entry and no live process; serving, Ctrl+C is
`stopped` and status 0, SIGTERM / SIGHUP `stopped (terminated by ...)` and 143 / 129, the port
free and the prepared trace kept. Bad options are one `error:` line before any work."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from support.hostile import TAG_VARIABLE, age, aged_sample, tagged_processes, tree
from tokentrace.annotate import annotation_record, read_tail
from tokentrace.runtime.files import cache_root
from tokentrace.view import TraceServer

CASES = [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)]
STOPS = [(signal.SIGINT, 0, "stopped"), (signal.SIGTERM, 143, "stopped (terminated by SIGTERM)"),
         (signal.SIGHUP, 129, "stopped (terminated by SIGHUP)")]


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    """This test's user cache (annotated copies, the merge cache of every profile folder
    `view` is given); the compiled trace processor is shared with the real user cache
    (compiled once)."""
    shared = cache_root() / "wasm"
    shared.mkdir(parents=True, exist_ok=True)
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "wasm").symlink_to(shared, target_is_directory=True)
    monkeypatch.setenv("TOKENTRACE_CACHE_DIR", str(folder))
    return folder


@pytest.fixture()
def plain_merged(merged_t39, tmp_path) -> Path:
    """A user's plain (not annotated) merged trace of the sample."""
    mine = tmp_path / "mine" / "run.merged.json"
    mine.parent.mkdir()
    shutil.copy(merged_t39[0], mine)
    return age(mine)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class View:
    """`tokentrace view --no-browser --port P TARGET`, its own session, its processes tagged."""

    def __init__(self, command: list[str], target: Path, tmp_path: Path, *args: str,
                 sigint_ignored: bool = False) -> None:
        self.port, self.tag = _free_port(), uuid.uuid4().hex
        self.out_path = tmp_path / f"view-{self.tag}.out"
        with open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen(
                [*command, "--no-browser", "--port", str(self.port), *args, str(target)],
                stdout=out, stderr=subprocess.PIPE, env={**os.environ, TAG_VARIABLE: self.tag},
                start_new_session=True,
                preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None)

    def wait_for(self, ready, timeout: float = 180) -> None:
        start = time.monotonic()
        while not ready():
            assert self.proc.poll() is None, f"view ended first: {self.proc.stderr.read().decode()}"
            assert time.monotonic() - start < timeout, "view never reached the point to signal"
            time.sleep(0.002)

    def stop(self, sig: int, timeout: float = 120) -> tuple[int, str, str, list[int]]:
        """Sends ``sig``; (exit status, stdout, stderr, pids of its processes alive 0.5 s after)."""
        self.proc.send_signal(sig)
        try:
            err = self.proc.communicate(timeout=timeout)[1].decode()
        finally:
            deadline = time.monotonic() + 0.5
            alive = tagged_processes(self.tag)
            while alive and time.monotonic() < deadline:
                time.sleep(0.05)
                alive = tagged_processes(self.tag)
            for pid in alive:  # never leave them behind, even when the test fails
                os.kill(pid, signal.SIGKILL)
        return self.proc.returncode, self.out_path.read_text(), err, alive

    def serving(self) -> bool:
        text = self.out_path.read_text()
        return "open http://" in text and "\n" in text.split("open http://", 1)[1]

    def token(self) -> str:
        """The token in the URL it printed (once :meth:`serving`)."""
        return re.search(r"\?token=([A-Za-z0-9_-]+)", self.out_path.read_text()).group(1)


def _temp_in(folder: Path, manifest: bool | None = None):
    """``ready``: a temp file exists in ``folder`` or one level below (with ``manifest``: in an
    entry that has (True) or lacks (False) its manifest)."""
    def ready() -> bool:
        for entry in (folder, *(p for p in folder.glob("*") if p.is_dir())) if folder.is_dir() else ():
            if manifest is not None and (entry / "manifest.json").is_file() != manifest:
                continue
            if any(p.name.endswith(".tmp") for p in entry.iterdir()):
                return True
        return False
    return ready


def _left_behind(*folders: Path) -> list[str]:
    """Temp files, moved-aside old files, probes, cache entries without a manifest and
    annotated copies without their annotations, under ``folders`` (the shared wasm/ aside)."""
    found = []
    for folder in folders:
        for path in sorted(folder.rglob("*")) if folder.is_dir() else ():
            if "wasm" in path.relative_to(folder).parts:
                continue
            if path.name.endswith((".tmp", ".old")) or path.name.startswith(".probe-"):
                found.append(f"temp file {path}")
            elif path.is_dir() and path.parent.name in (".tokentrace-cache", "merged") \
                    and not (path / "manifest.json").is_file():
                found.append(f"partial cache entry {path}: {sorted(p.name for p in path.iterdir())}")
            elif path.parent.name == "annotated" and annotation_record(path) is None:
                found.append(f"annotated copy without annotations {path}")
    return found


def _one_error_line(code: int, expected: int, err: str, alive: list[int], *fragments: str) -> None:
    assert code == expected, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in lines[0], err
    assert not alive, f"processes left alive: {alive}"


def _port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        refused = probe.connect_ex(("127.0.0.1", port)) != 0
    with socket.socket() as probe:  # SO_REUSEADDR: only a listening socket stops the bind
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))
        probe.listen()
    return refused


def _message(sig: int) -> str:
    return "interrupted" if sig == signal.SIGINT else f"terminated by {signal.Signals(sig).name}"


@pytest.mark.parametrize("sig, expected", CASES)
def test_a_signal_while_merging_leaves_nothing(sig, expected, tmp_path, cache, view_command):
    profile = aged_sample(tmp_path)
    before = tree(profile)
    view = View(view_command, profile, tmp_path)
    view.wait_for(_temp_in(cache / "merged", manifest=False))
    code, _, err, alive = view.stop(sig)
    _one_error_line(code, expected, err, alive, _message(sig))
    assert _left_behind(profile, cache) == []  # before: the entry and its temp file (SIGTERM, SIGHUP)
    assert tree(profile) == before  # view never writes into the profile folder
    assert _port_is_free(view.port)


@pytest.mark.parametrize("sig, expected", CASES)
def test_a_signal_while_annotating_the_cache_entry_leaves_it_whole(sig, expected, tmp_path, cache, view_command):
    profile = aged_sample(tmp_path)
    view = View(view_command, profile, tmp_path)
    view.wait_for(_temp_in(cache / "merged", manifest=True))
    code, _, err, alive = view.stop(sig)
    _one_error_line(code, expected, err, alive, _message(sig))
    assert _left_behind(profile, cache) == []  # before: a 4 MB temp file in the entry
    assert not (profile / ".tokentrace-cache").exists()
    entries = list((cache / "merged").iterdir())
    assert len(entries) == 1 and (entries[0] / "manifest.json").is_file()
    read_tail(entries[0] / "sample.merged.json")  # the combined file is whole (plain, as merged)
    assert _port_is_free(view.port)


@pytest.mark.parametrize("sig, expected", CASES)
def test_a_signal_while_writing_the_annotated_copy_leaves_nothing(sig, expected, tmp_path, cache,
                                                                 plain_merged, view_command):
    before = plain_merged.read_bytes()
    view = View(view_command, plain_merged, tmp_path)
    view.wait_for(_temp_in(cache / "annotated"))
    code, _, err, alive = view.stop(sig)
    _one_error_line(code, expected, err, alive, _message(sig))
    assert _left_behind(cache, plain_merged.parent) == []  # before: the copy's temp file
    assert not (cache / "annotated").exists()  # the folder it made goes too
    assert plain_merged.read_bytes() == before


def _slow_download(port: int, token: str) -> socket.socket:
    """A tab downloading the trace that stops reading: the server's thread blocks writing."""
    client = socket.create_connection(("127.0.0.1", port), timeout=30)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.sendall(f"GET /localtrace?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    assert client.recv(64).startswith(b"HTTP/1.0 200")
    return client


@pytest.mark.parametrize("sig, expected, line", STOPS)
def test_stopping_the_server(sig, expected, line, tmp_path, cache, plain_merged, view_command):
    view = View(view_command, plain_merged, tmp_path)
    view.wait_for(view.serving)
    client = _slow_download(view.port, view.token())
    try:
        code, out, err, alive = view.stop(sig)
    finally:
        client.close()
    assert code == expected, err
    assert out.strip().splitlines()[-1] == line, out
    assert [x for x in err.splitlines() if not x.startswith("127.0.0.1 ")] == [], err
    assert not alive and _port_is_free(view.port)
    copies = list((cache / "annotated").iterdir())
    assert len(copies) == 1 and annotation_record(copies[0]) is not None  # the prepared trace stays
    assert _left_behind(cache, plain_merged.parent) == []


def test_sigint_stops_a_background_job_while_it_prepares(tmp_path, cache, view_command):
    profile = aged_sample(tmp_path)
    view = View(view_command, profile, tmp_path, sigint_ignored=True)
    view.wait_for(_temp_in(cache / "merged", manifest=False))
    code, _, err, alive = view.stop(signal.SIGINT, timeout=60)  # before: ignored, then served
    _one_error_line(code, 130, err, alive, "interrupted")
    assert _left_behind(profile, cache) == []


@pytest.mark.parametrize("case, args, fragment", [
    ("port taken", (), "is in use"),
    ("negative gap", ("--min-gap-us", "-1"), "--min-gap-us -1.0: give a finite number"),
    ("nan gap", ("--min-gap-us", "nan"), "--min-gap-us nan: give a finite number"),
    ("infinite gap", ("--min-gap-us", "inf"), "--min-gap-us inf: give a finite number"),
    ("port out of range", ("--port", "70000"), "--port 70000: give a port from 1 to 65535"),
    ("missing", (), "no such file or folder"),
])
def test_bad_options_are_one_error_line_before_any_work(case, args, fragment, tmp_path, cache, view_command):
    profile = aged_sample(tmp_path)
    target = tmp_path / "nowhere" if case == "missing" else profile
    holder = socket.create_server(("127.0.0.1", 0)) if case == "port taken" else None
    port = ("--port", str(holder.getsockname()[1])) if holder is not None else ("--port", "0")
    try:
        done = subprocess.run([*view_command, "--no-browser", *port, *args, str(target)],
                              capture_output=True, text=True, timeout=120)
    finally:
        if holder is not None:
            holder.close()
    _one_error_line(done.returncode, 1, done.stderr, [], fragment)
    assert not (profile / ".tokentrace-cache").exists()  # before: merged and annotated first
    assert sorted(p.name for p in cache.iterdir()) == ["wasm"]


def test_an_error_while_preparing_leaves_nothing(tmp_path, cache, view_command):
    profile = aged_sample(tmp_path)
    proton = profile / "sample-TP1.proton.chrome_trace.gz"
    cut = profile / "sample-TP1.proton.chrome_trace"
    raw = gzip.decompress(proton.read_bytes())
    proton.unlink()
    cut.write_bytes(raw[: len(raw) // 2])
    age(cut)
    done = subprocess.run([*view_command, "--no-browser", "--port", "0", str(profile)],
                          capture_output=True, text=True, timeout=300)
    _one_error_line(done.returncode, 1, done.stderr, [], str(cut))
    assert _left_behind(profile, cache) == []
    assert not (profile / ".tokentrace-cache").exists()
    assert not list((cache / "merged").glob("*"))


def test_close_ends_the_open_connections(annotated_sample):
    server = TraceServer(annotated_sample, 0).start()
    before = set(threading.enumerate())
    client = _slow_download(server.port, server.token)
    try:
        time.sleep(0.3)  # its thread is blocked writing the trace
        server.close()
        left = [t for t in set(threading.enumerate()) - before if t.is_alive()]
        assert left == []  # before: the connection's thread stayed, writing
    finally:
        client.close()
    assert _port_is_free(server.port)


@pytest.mark.parametrize("thread_runs", ["before the signal", "after the signal"])
def test_a_signal_while_a_connection_is_handed_to_its_thread(thread_runs, annotated_sample, monkeypatch, capfd):
    """Ctrl+C reaches `serve_forever` (the main thread, as in `tokentrace view`) inside
    `Thread.start()` of a new connection: its thread already serving (writing the trace to a
    client that stopped reading) or scheduled only after the signal was handled. The signal
    stops the server and the connection ends once, quietly: before, both threads freed its
    slot (`ValueError: Semaphore released too many times`, a traceback on the terminal) and the
    main thread closed the socket under the thread writing to it."""
    server = TraceServer(annotated_sample, 0)
    serving, handed, answers, uncaught = threading.current_thread(), [], [], []
    gate, stopped = threading.Event(), threading.Event()
    monkeypatch.setattr(threading, "excepthook", lambda args: uncaught.append(args.exc_value))

    def download() -> None:  # _slow_download, but an answer may not come
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as client:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            client.sendall(f"GET /localtrace?token={server.token} HTTP/1.1\r\n"
                           f"Host: 127.0.0.1:{server.port}\r\n\r\n".encode())
            try:
                answers.append(client.recv(64)[:12])
            except OSError:  # closed unanswered (a reset: the request was never read)
                answers.append(b"")
            stopped.wait(30)  # reads nothing more until the server is stopped

    client = threading.Thread(target=download, daemon=True)
    client.start()
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if threading.current_thread() is not serving or handed:
            return real_start(thread)
        handed.append(thread)
        if thread_runs == "after the signal":
            run = thread.run
            thread.run = lambda: (gate.wait(30), run())
        real_start(thread)
        deadline = time.monotonic() + 30
        while thread_runs == "before the signal" and not server.requests and time.monotonic() < deadline:
            time.sleep(0.01)  # until its thread answers 200 and writes the trace
        time.sleep(0.3)  # ... and blocks writing it
        raise KeyboardInterrupt  # what Python raises where Ctrl+C finds the main thread

    monkeypatch.setattr(threading.Thread, "start", start)
    try:
        with pytest.raises(KeyboardInterrupt):
            server.serve_forever()
    finally:
        monkeypatch.setattr(threading.Thread, "start", real_start)
        gate.set()  # "after the signal": the connection's thread runs now
        server.close()
        stopped.set()
        client.join(30)
    assert len(handed) == 1
    handed[0].join(10)
    assert not handed[0].is_alive()
    assert uncaught == []  # before: ValueError('Semaphore released too many times')
    assert capfd.readouterr().err == ""
    assert server._httpd.open_connections() == 0
    assert answers == [b"HTTP/1.0 200" if thread_runs == "before the signal" else b""]
    assert _port_is_free(server.port)
