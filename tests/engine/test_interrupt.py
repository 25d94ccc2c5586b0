"""Issue 31: a signal or a time limit stops the embedded engine mid-query. Before, SIGINT and
SIGTERM were noticed only when the WebAssembly code called back into Python: a query that never
did ran on through Ctrl-C, and one that did raised inside wasmtime's ctypes callback ("Exception
ignored on calling ctypes callback function") and crashed the trace processor; there was no time
limit. The real engine runs here, on queries that never end or that stream reply after reply."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from support.hostile import run_cli, signal_midway
from tokentrace.engine import open_engine
from tokentrace.errors import EngineError, QueryError
from tokentrace.options import EngineOptions
from tokentrace.runtime.signals import Terminated, signals_raise

FOREVER = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
# Tens of millions of rows: the engine calls back into Python for every batch of the reply, so
# a signal's handler would run inside one of those callbacks.
STREAMING = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 30000000) "
             "SELECT x FROM c")
SAFETY_S = 30  # a stop that does not work fails the test here instead of hanging the run


@pytest.fixture()
def tiny(tmp_path):
    trace = tmp_path / "tiny.json"
    trace.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, '
                     '"tid": 1}]}')
    return trace


def _signal_soon(sig: int, after_s: float = 0.5) -> threading.Timer:
    timer = threading.Timer(after_s, os.kill, (os.getpid(), sig))
    timer.start()
    return timer


@pytest.mark.parametrize("sql", [FOREVER, STREAMING], ids=["no callbacks", "reply callbacks"])
@pytest.mark.parametrize("sig, raised", [(signal.SIGINT, KeyboardInterrupt),
                                         (signal.SIGTERM, Terminated)])
def test_a_signal_stops_the_query_as_its_exception(tiny, sql, sig, raised):
    engine = open_engine(tiny, warn=False)
    started = time.monotonic()
    with signals_raise():  # the commands' handlers: SIGTERM becomes Terminated
        timer = _signal_soon(sig)
        try:
            with pytest.raises(raised), engine.time_limit(SAFETY_S):
                engine.query(sql)
        finally:
            timer.cancel()
    assert time.monotonic() - started < 5
    with pytest.raises(EngineError, match=f"interrupted by {signal.Signals(sig).name}; open the "
                                          "trace again"):
        engine.query("SELECT 1")
    engine.close()


def test_the_time_limit_stops_a_query_and_only_inside_its_block(tiny):
    with open_engine(tiny, warn=False) as engine:
        with engine.time_limit(60):
            assert engine.query("SELECT 1 AS one").one[0] == 1
        started = time.monotonic()
        with pytest.raises(QueryError, match="ran past its time limit"), engine.time_limit(0.5):
            engine.query(FOREVER)
        assert 0.5 <= time.monotonic() - started < 5
        with pytest.raises(EngineError, match="open the trace again"):
            engine.query("SELECT 1")


def test_a_query_after_a_finished_block_is_not_stopped(tiny):
    with open_engine(tiny, warn=False) as engine:
        with engine.time_limit(0.2):
            engine.query("SELECT 1")
        time.sleep(0.3)
        assert engine.query("SELECT 2 AS two").two[0] == 2  # the deadline went with the block


def test_the_query_command_honours_its_timeout(tiny, tmp_path):
    sql = tmp_path / "forever.sql"
    sql.write_text(FOREVER + ";\n")
    out = tmp_path / "out.parquet"
    started = time.monotonic()
    code, err = run_cli("query", sql, tiny, "-o", out, "--timeout", "1", timeout=60)
    assert code == 1 and err.splitlines() == [err] and "ran past its time limit" in err, err
    assert 1 <= time.monotonic() - started < 30
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == [
        "forever.sql", "tiny.json"]


@pytest.mark.parametrize("sig, expected", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_the_query_command_stops_at_a_signal(tiny, tmp_path, sig, expected):
    sql = tmp_path / "forever.sql"
    sql.write_text(FOREVER + ";\n")
    start = time.monotonic()
    code, err, alive = signal_midway(["query", sql, tiny, "-o", tmp_path / "out.parquet"], sig,
                                     lambda: time.monotonic() - start > 3, timeout=60)
    assert code == expected, err
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert not alive and not (tmp_path / "out.parquet").exists()


LIBRARY = textwrap.dedent("""
    import sys
    from tokentrace.engine import open_engine
    engine = open_engine(sys.argv[1], warn=False)
    print("ready", flush=True)
    with engine.time_limit(30):
        engine.query(sys.argv[2])
    print("not stopped", flush=True)
""")


def test_a_library_user_keeps_the_default_action_of_sigterm(tiny):
    """No handler of tokentrace's outside its commands: SIGTERM still ends the process by its
    default action, once the engine has left the WebAssembly code."""
    process = subprocess.Popen([sys.executable, "-c", LIBRARY, str(tiny), FOREVER],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "ready\n"
    time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=SAFETY_S + 10)
    assert process.returncode == -signal.SIGTERM, (out, err)
    assert out == "" and err == ""


def test_an_engine_without_stop_checks_takes_the_signal_when_the_call_ends(tiny):
    """The commands that run only bundled queries leave the stop checks out (they cost a third
    of the query time): a signal is then noted during the call and raised once it returned,
    never inside the engine's callbacks, and the trace is closed to further queries."""
    engine = open_engine(tiny, EngineOptions(stoppable=False), warn=False)
    streaming = STREAMING.replace("30000000", "2000000")
    with signals_raise():
        timer = _signal_soon(signal.SIGINT, 0.2)
        try:
            with pytest.raises(KeyboardInterrupt):
                engine.query(streaming)
        finally:
            timer.cancel()
    with pytest.raises(EngineError, match="interrupted by SIGINT; open the trace again"):
        engine.query("SELECT 1")
    engine.close()


STARTUP_SIGNAL = textwrap.dedent("""
    import os, signal, sys
    from tokentrace.engine import embedded, wasm_host
    from tokentrace.runtime.command import command

    real, raised_inside, sent = wasm_host._implementations, [], []

    def implementations(state):
        def wrap(name, func):
            def call(*args):
                try:
                    if not sent:  # the first callback of start-up: the signal comes now
                        sent.append(name)
                        os.kill(os.getpid(), int(sys.argv[1]))
                    for _ in range(2000):  # bytecodes: where a Python handler would run
                        pass
                    return func(*args)
                except BaseException as exc:  # a handler raised inside the callback
                    raised_inside.append(type(exc).__name__)
                    raise
            return call
        return {name: wrap(name, func) for name, func in real(state).items()}

    wasm_host._implementations = implementations
    try:
        with command():
            embedded.WasmTransport()
            print("started")
    finally:
        print(f"sent in {sent}, raised inside callbacks: {raised_inside}", file=sys.stderr)
""")


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_during_start_up_is_raised_after_the_wasm_call(sig, code):
    """Start-up runs wasm that calls back into Python (constructors: clocks, heap growth): a
    signal there is noted and raised once the call is back in Python, never inside a ctypes
    callback (where the trampoline's own code can swallow it: "Exception ignored on calling
    ctypes callback function", and the command ran on to exit 0)."""
    done = subprocess.run([sys.executable, "-c", STARTUP_SIGNAL, str(int(sig))], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == code, done.stderr
    assert "started" not in done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert "raised inside callbacks: []" in done.stderr and "sent in ['" in done.stderr, done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr
