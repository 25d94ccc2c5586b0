"""Fixtures of the view tests: the annotated sample, `tokentrace view` as a subprocess, and
headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: fd 3
in, fd 4 out, NUL-terminated JSON; no websocket client needed)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tokentrace.annotate import annotate_file

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
_SCRIPT = Path(sys.executable).parent / "tokentrace"
#: The console script of this environment (what a user runs), else the same entry point.
TOKENTRACE = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-c", "from tokentrace.cli import main; main()"]


@pytest.fixture(scope="session")
def annotated_sample(merged_t39, tmp_path_factory) -> Path:
    """The combined sample_t39_tp2, annotated into a copy (the session's merge stays plain)."""
    plain, _ = merged_t39
    return annotate_file(plain, tmp_path_factory.mktemp("view") / "sample.annotated.json").path


def free_port() -> int:
    """A port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def url_in(banner: str, port: int) -> tuple[str, str]:
    """(the URL to open, its token) from what `tokentrace view` printed."""
    found = re.search(rf"(http://127\.0\.0\.1:{port}/\?token=([A-Za-z0-9_-]+))\s", banner)
    assert found, banner
    return found.group(1), found.group(2)


class ViewProcess:
    """`tokentrace view --no-browser --port P TRACE` in a subprocess; its stderr is the request log."""

    def __init__(self, trace: Path, port: int, log: Path) -> None:
        self.port, self.log = port, log
        self._err = open(log, "wb")
        self.proc = subprocess.Popen([*TOKENTRACE, "view", "--no-browser", "--port", str(port), str(trace)],
                                     stdout=subprocess.PIPE, stderr=self._err)
        self.banner = self._wait_for(f"http://127.0.0.1:{port}/", line=True)
        self.url, self.token = url_in(self.banner, port)

    def _wait_for(self, text: str, timeout: float = 60, line: bool = False) -> str:
        """stdout up to ``text`` (and the end of its line with ``line``)."""
        seen, deadline = b"", time.monotonic() + timeout
        while text.encode() not in seen or (line and b"\n" not in seen.split(text.encode(), 1)[1]):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"tokentrace view did not start: {seen!r} {self.log.read_text()}")
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:
                seen += os.read(self.proc.stdout.fileno(), 4096)
        return seen.decode()

    def interrupt(self, timeout: float = 20) -> tuple[int, str]:
        """Sends SIGINT; returns (exit status, the rest of stdout)."""
        self.proc.send_signal(signal.SIGINT)
        out, _ = self.proc.communicate(timeout=timeout)
        self._err.close()
        return self.proc.returncode, out.decode()

    def requests(self) -> list[str]:
        """The request log lines so far (``127.0.0.1 GET /path status``)."""
        return [line for line in self.log.read_text().splitlines() if line.startswith("127.0.0.1 ")]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._err.close()


@pytest.fixture(scope="session")
def view_command() -> list[str]:
    """The command line of `tokentrace view` (options and the trace to be added)."""
    return [*TOKENTRACE, "view"]


@pytest.fixture
def view_process(tmp_path):
    """start(trace) -> a running ViewProcess on a free port; killed at the end if still up."""
    started = []

    def start(trace: Path) -> ViewProcess:
        started.append(ViewProcess(trace, free_port(), tmp_path / f"view-{len(started)}.log"))
        return started[-1]

    yield start
    for process in started:
        process.close()


class Chromium:
    """Headless Chromium with one page, driven over the DevTools protocol on a pipe. Every host
    but 127.0.0.1 resolves to nothing (``--host-resolver-rules``)."""

    def __init__(self, profile: Path, width: int, height: int) -> None:
        to_chrome, self._out = os.pipe()
        self._in, from_chrome = os.pipe()

        def fds() -> None:  # in the child: the pipe ends at fds 3 and 4, inheritable
            high_in, high_out = fcntl.fcntl(to_chrome, fcntl.F_DUPFD, 10), fcntl.fcntl(from_chrome, fcntl.F_DUPFD, 10)
            os.dup2(high_in, 3, inheritable=True)
            os.dup2(high_out, 4, inheritable=True)

        command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                   "--remote-debugging-pipe", "--no-first-run", "--disable-background-networking",
                   "--disable-component-update", "--disable-sync", "--disable-extensions",
                   "--disable-default-apps", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                   f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"]
        self.proc = subprocess.Popen(command, close_fds=False, preexec_fn=fds,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome)
        os.close(from_chrome)
        self._buffer, self._next, self.events = b"", 0, []
        page = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})["sessionId"]
        for domain in ("Network", "Page", "Runtime", "Log"):
            self.page(f"{domain}.enable")
        self.page("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def _message(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no DevTools message")
            if select.select([self._in], [], [], left)[0]:
                chunk = os.read(self._in, 1 << 20)
                if not chunk:
                    raise EOFError("chromium closed its DevTools pipe")
                self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 60) -> dict:
        self._next += 1
        message = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._message(deadline - time.monotonic())
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def page(self, method: str, params: dict | None = None, timeout: float = 60) -> dict:
        """A command to the page's session."""
        return self.call(method, params, self.session, timeout)

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page."""
        return self.page("Runtime.evaluate", {"expression": expression, "returnByValue": True})["result"].get("value")

    def pump(self, seconds: float) -> None:
        """Collects events for ``seconds``."""
        end = time.monotonic() + seconds
        while True:
            try:
                self.events.append(self._message(max(0.01, end - time.monotonic())))
            except TimeoutError:
                return

    def of(self, method: str) -> list[dict]:
        """The params of the events named ``method`` received so far."""
        return [e["params"] for e in self.events if e.get("method") == method]

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (OSError, EOFError, TimeoutError, RuntimeError):
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for fd in (self._in, self._out):
            try:
                os.close(fd)
            except OSError:
                pass


@pytest.fixture
def chromium(tmp_path):
    """A headless Chromium page, 1600x1000 at scale 1 (skips without a chromium binary)."""
    if CHROMIUM is None:
        pytest.skip("no chromium binary (apt-get install chromium)")
    browser = Chromium(tmp_path / "chromium-profile", 1600, 1000)
    yield browser
    browser.close()
