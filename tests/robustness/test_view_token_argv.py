"""Issue 31, who can read a trace: the token of ``tokentrace view`` is the one way in, so it must
not be where other local users can read it. A process's arguments are (``/proc/PID/cmdline``
is readable by every user, ``ps -ef`` shows it): opening the browser with the tokened URL as
an argument (``webbrowser.open(url)``: ``xdg-open URL``, ``firefox URL``, or ``$BROWSER``) hands
the token to anyone who lists processes while the browser starts (for a browser started
fresh, as long as it runs). Jupyter opens a private (0600) redirect file instead."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from support.hostile import CLI

pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").is_file(), reason="reads /proc")

BROWSER_S = 4  # how long the stand-in browser runs: the window in which its arguments are seen


def _arguments_holding(token: str, skip: int) -> list[str]:
    """Command lines of live processes (but ``skip``) that hold ``token``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == skip:
            continue
        try:
            line = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if token in line:
            found.append(line)
    return found


def test_the_browser_is_opened_without_the_token_in_any_process_arguments(tmp_path):
    trace = tmp_path / "tiny.json"  # not a merged trace: served as it is, nothing prepared
    trace.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, '
                     '"tid": 1}]}')
    marker = f"tt-browser-{os.getpid()}"
    env = {**os.environ, "BROWSER": f"sh -c 'sleep {BROWSER_S}; true' {marker} %s",
           "TOKENTRACE_CACHE_DIR": str(tmp_path / "cache")}
    view = subprocess.Popen([*CLI, "view", str(trace), "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, text=True, start_new_session=True)
    try:
        token, exposed = None, []
        deadline = time.monotonic() + 60
        while token is None:
            assert time.monotonic() < deadline and view.poll() is None, "view printed no URL"
            found = re.search(r"\?token=([A-Za-z0-9_-]+)", view.stdout.readline())
            token = found.group(1) if found else None
        browser_seen = False
        deadline = time.monotonic() + BROWSER_S - 1
        while time.monotonic() < deadline and not exposed:
            exposed = _arguments_holding(token, skip=os.getpid())
            browser_seen = browser_seen or bool(_arguments_holding(marker, skip=os.getpid()))
            time.sleep(0.05)
        assert browser_seen or exposed, "the stand-in browser never ran"
        assert exposed == []  # before: ['sh -c sleep 4; true tt-browser-... http://127.0.0.1:P/?token=T']
    finally:
        os.killpg(view.pid, signal.SIGINT)
        try:
            view.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(view.pid, signal.SIGKILL)
            view.wait()
        deadline = time.monotonic() + BROWSER_S + 2  # the stand-in browser ends by itself
        while _arguments_holding(marker, skip=os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.1)
