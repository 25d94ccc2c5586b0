"""SQL packages reach every backend; native and remote run against a stand-in server.

The stand-in (:mod:`fake_shell`) is the embedded trace processor behind ``POST /rpc``, so these
tests pin our client to the server's protocol, not to any ``perfetto`` package internals.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import tokentrace.engine.native as native
from tokentrace.catalog import open_trace as open_with_catalog
from tokentrace.catalog.load import bundled_package
from tokentrace.engine import SqlPackage, open_engine
from tokentrace.errors import EngineError, QueryError
from tokentrace.options import EngineOptions

HERE = Path(__file__).resolve().parent
PROTON = HERE.parent / "data" / "sample_t39_tp2" / "sample-TP0.proton.chrome_trace.gz"
INCLUDE_RANKS = "INCLUDE PERFETTO MODULE tokentrace.ranks; SELECT COUNT(*) AS n FROM tt_ranks"
COUNT_SLICES = "SELECT COUNT(*) AS n FROM slice"
ANSWER = SqlPackage("mine", {"mine.answer": "CREATE PERFETTO FUNCTION mine_answer() RETURNS INT "
                                            "AS SELECT 42;"})
ASK = "INCLUDE PERFETTO MODULE mine.answer; SELECT mine_answer() AS a"


def _fake_shell(tmp_path: Path) -> Path:
    """An executable that runs the stand-in with this interpreter, as ``--shell`` would."""
    script = tmp_path / "trace_processor_shell"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "fake_shell.py"}" "$@"\n')
    script.chmod(0o755)
    return script


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def embedded_counts():
    with open_with_catalog(PROTON, warn=False) as engine:
        return engine.query(COUNT_SLICES).n[0], engine.query(INCLUDE_RANKS).n[0]


@pytest.fixture
def server():
    """A stand-in server on a free port; yields its address, killed afterwards."""
    port = _free_port()
    process = subprocess.Popen([sys.executable, str(HERE / "fake_shell.py"), "-D", "--http-port",
                                str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline, "the stand-in server did not start"
            time.sleep(0.05)
    yield f"127.0.0.1:{port}"
    process.kill()
    process.wait()
    process.stderr.close()


def test_no_packages_no_tokentrace_modules(loaded_traces):
    with open_engine(PROTON, warn=False) as bare:
        with pytest.raises(QueryError, match="tokentrace.ranks"):
            bare.query(INCLUDE_RANKS)
    assert loaded_traces(PROTON.resolve()).query(INCLUDE_RANKS).n[0] >= 1  # catalog.open_trace


@pytest.mark.slow
def test_caller_packages_are_registered():
    with open_engine(PROTON, warn=False, sql_packages=[ANSWER]) as engine:
        assert engine.query(ASK).a[0] == 42
        with pytest.raises(QueryError):
            engine.query(INCLUDE_RANKS)  # only what was passed


def test_sql_package_checks_its_fields():
    with pytest.raises(ValueError, match="must start with 'mine.'"):
        SqlPackage("mine", {"yours.x": "SELECT 1"})
    with pytest.raises(ValueError, match="needs a name"):
        SqlPackage("", {})
    with pytest.raises(TypeError, match="SqlPackage objects"):
        open_engine(PROTON, sql_packages=[("mine", {})])
    package = bundled_package()
    assert package.name == "tokentrace" and "tokentrace.ranks" in package.modules
    assert (package.root / "ranks.sql").is_file()
    with pytest.raises(TypeError):
        package.modules["tokentrace.x"] = ""  # read-only
    assert "modules" in repr(package) and "CREATE" not in repr(package)


@pytest.mark.slow
def test_native_through_a_shell(tmp_path, embedded_counts):
    shell = _fake_shell(tmp_path)
    # The bundled package has a root: read by the shell (--add-sql-package); ANSWER goes by RPC.
    engine = open_engine(PROTON, EngineOptions("native", shell_path=shell), warn=False, sql_packages=[bundled_package(), ANSWER])
    with engine:
        process = engine._client.transport.process
        assert (engine.query(COUNT_SLICES).n[0], engine.query(INCLUDE_RANKS).n[0]) == embedded_counts
        assert engine.query(ASK).a[0] == 42
        assert engine.load.bytes_fed == PROTON.stat().st_size
    assert process.poll() is not None  # closing killed the shell


def test_native_shell_that_never_serves(tmp_path, monkeypatch):
    monkeypatch.setattr(native, "START_TIMEOUT_S", 0.3)
    quiet = tmp_path / "trace_processor_shell"
    quiet.write_text("#!/bin/sh\necho waiting\nsleep 30\n")
    quiet.chmod(0o755)
    start = time.monotonic()
    with pytest.raises(EngineError, match=r"did not serve on port \d+ within 0.3 s \(waiting\)"):
        open_engine(PROTON, EngineOptions("native", shell_path=quiet))
    assert time.monotonic() - start < 10  # killed, not waited for


def test_native_shell_that_rejects_a_package(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    with pytest.raises(EngineError, match="did not start: it exited with status 1"):
        open_engine(PROTON, EngineOptions("native", shell_path=_fake_shell(tmp_path)), sql_packages=[SqlPackage("nope", {}, root=bad / "missing")])


@pytest.mark.slow
def test_remote_loads_registers_and_queries(server, embedded_counts):
    with open_engine(PROTON, EngineOptions("remote", address=server), warn=False, sql_packages=[bundled_package()]) as engine:
        assert (engine.query(COUNT_SLICES).n[0], engine.query(INCLUDE_RANKS).n[0]) == embedded_counts
        assert engine.load.bytes_fed == PROTON.stat().st_size
    # Without a trace path: the server's own trace; its tokentrace package (already included)
    # is kept, so including it again still works; a new package is added.
    with open_engine(None, EngineOptions("remote", address=server), sql_packages=[bundled_package(), ANSWER]) as engine:
        assert (engine.query(COUNT_SLICES).n[0], engine.query(INCLUDE_RANKS).n[0]) == embedded_counts
        assert engine.query(ASK).a[0] == 42
    # A new trace makes the server start a fresh trace processor, dropping what was registered:
    # packages are registered after the load, so they are there.
    with open_engine(PROTON, EngineOptions("remote", address=server), warn=False, sql_packages=[bundled_package()]) as engine:
        assert engine.query(INCLUDE_RANKS).n[0] == embedded_counts[1]
        with pytest.raises(QueryError, match="mine"):
            engine.query(ASK)


def test_remote_refuses_a_bad_trace(server, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("hello, not a trace")
    with pytest.raises(EngineError, match="could not parse the trace: Unknown trace type"):
        open_engine(bad, EngineOptions("remote", address=server))


def test_remote_server_that_is_not_one():
    # Something listening that speaks no HTTP: a clear EngineError, not a traceback.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(2)

        def answer_junk():
            for _ in range(2):  # the reachability probe, then the first request
                conn, _ = listener.accept()
                with conn:
                    conn.settimeout(5)
                    try:
                        conn.recv(65536)
                        conn.sendall(b"junk\r\n\r\n")
                    except OSError:
                        pass

        thread = threading.Thread(target=answer_junk, daemon=True)
        thread.start()
        address = "127.0.0.1:%d" % listener.getsockname()[1]
        with pytest.raises(EngineError, match=f"the server at {address} failed"):
            open_engine(PROTON, EngineOptions("remote", address=address))
        thread.join(5)
