"""What any local process can send to `tokentrace view` (issue 31): escape sequences in a path
(echoed raw to the user's terminal before), symbolic links in the UI folder (followed out of it),
idle connections (kept for ever, a thread each), a 70 kB URL and a TLS hello (no HTTP answer and
an ``AttributeError`` line). Every test here is bounded by socket timeouts of a few seconds."""

from __future__ import annotations

import os
import socket
import ssl
import threading
import time

import pytest

from tokentrace.view import TraceServer
from tokentrace.view import server as server_module


def _token(server) -> str:
    return getattr(server, "token", "")


def _exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Sends ``data``; returns what comes back until the server closes (or ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as client:
        client.sendall(data)
        received = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = client.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
            if _complete(received):
                break
        return received


def _complete(received: bytes) -> bool:
    """Whether a whole answer is in: headers and as many body bytes as Content-Length says (the
    body may come in a later packet than the headers, so the headers alone are not enough)."""
    head, sep, body = received.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value.strip())
    return False  # no length: the answer ends when the server closes


def _request(server, path: str) -> bytes:
    line = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nConnection: close\r\n\r\n"
    return line.encode("latin-1")


@pytest.fixture
def served(merged_t39):
    lines: list[str] = []
    with TraceServer(merged_t39[0], 0, log=lines.append).start() as server:
        yield server, lines


def test_escape_sequences_in_a_path_are_printed_escaped(served):
    server, lines = served
    hostile = "/\x1b]0;owned\x07\x1b[2J\x9b31m\r\nx"
    for path in (hostile, f"{hostile}?token={_token(server)}"):  # refused and served alike
        _exchange(server.port, _request(server, path.replace("\r\n", "")))
    time.sleep(0.2)
    assert len(lines) == 2, lines
    for line in lines:
        assert not any(ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 for c in line), repr(line)
        assert "\\x1b]0;owned\\x07\\x1b[2J\\x9b31m" in line


def test_symbolic_links_do_not_lead_out_of_the_ui_folder(merged_t39, tmp_path, monkeypatch):
    ui = tmp_path / "ui"
    (ui / "v1").mkdir(parents=True)
    (ui / "index.html").write_text("<title>Perfetto UI</title>")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "id_rsa").write_text("PRIVATE KEY")
    os.symlink(secret / "id_rsa", ui / "leak.txt")
    os.symlink(secret, ui / "v1" / "outside")
    os.symlink(secret, ui / "folder")  # a folder link: its index.html would be served
    (secret / "index.html").write_text("PRIVATE PAGE")
    os.symlink(ui / "index.html", ui / "inside.html")  # a link that stays inside is fine
    monkeypatch.setattr(server_module, "ui_dir", lambda: ui)
    with TraceServer(merged_t39[0], 0).start() as server:
        token = _token(server)
        for path in ("/leak.txt", "/v1/outside/id_rsa", "/folder/", "/folder/index.html"):
            answer = _exchange(server.port, _request(server, f"{path}?token={token}"))
            assert answer.startswith(b"HTTP/1.0 404") and b"PRIVATE" not in answer, (path, answer[:200])
        answer = _exchange(server.port, _request(server, f"/inside.html?token={token}"))
        assert answer.startswith(b"HTTP/1.0 200") and b"Perfetto UI" in answer


def _fast_idle_timeout(monkeypatch, seconds: float) -> None:
    try:
        from tokentrace.view import connections
    except ImportError:  # the code before: no timeout to shorten (nor any at all)
        return
    monkeypatch.setattr(connections, "IDLE_TIMEOUT_S", seconds)


@pytest.mark.parametrize("sent", [b"", b"GET / HTTP/1.1\r\nHost: 127.0.0.1"], ids=["silent", "half-request"])
def test_an_idle_connection_is_closed(merged_t39, monkeypatch, sent):
    _fast_idle_timeout(monkeypatch, 1.0)
    with TraceServer(merged_t39[0], 0).start() as server:
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", server.port), timeout=6) as client:
            client.sendall(sent)
            try:
                while client.recv(4096):
                    pass
                closed = True
            except TimeoutError:
                closed = False
        assert closed and time.monotonic() - start < 4


def test_a_70_kB_url_gets_414_and_no_traceback(served, capfd):
    server, lines = served
    path = f"/?token={_token(server)}&x=" + "a" * 70_000
    answer = _exchange(server.port, _request(server, path))
    time.sleep(0.2)
    err = capfd.readouterr().err
    assert answer.startswith(b"HTTP/1.0 414"), answer[:200]
    assert "Error" not in err and "error:" not in err, err
    assert len(lines) == 1 and " 414" in lines[0] and len(lines[0]) < 400


def _client_hello() -> bytes:
    """The first bytes a TLS client sends (``https://127.0.0.1:PORT``)."""
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_a_tls_hello_gets_a_plain_http_error_and_no_traceback(served, capfd):
    server, lines = served
    hello = _client_hello()
    assert hello[0] == 0x16
    start = time.monotonic()
    answer = _exchange(server.port, hello)
    time.sleep(0.2)
    err = capfd.readouterr().err
    assert answer.startswith(b"HTTP/1.0 400") and b"plain HTTP" in answer, answer[:200]
    assert time.monotonic() - start < 3  # at once, not after the idle timeout
    assert "Error" not in err and "error:" not in err, err
    assert len(lines) == 1 and lines[0].endswith(" 400")


def test_connection_threads_are_bounded(served):
    server, _ = served
    before = threading.active_count()
    clients = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(100)]
    try:
        time.sleep(1.0)
        threads = threading.active_count() - before
        assert threads <= 64, threads  # before: one thread per connection, 100
        refused = []
        for client in clients[64:]:
            try:
                refused.append(client.recv(200))
            except (TimeoutError, ConnectionResetError):
                refused.append(b"")
        assert all(answer.startswith(b"HTTP/1.0 503") for answer in refused), refused[:3]
    finally:
        for client in clients:
            client.close()
    time.sleep(0.5)
    answer = _exchange(server.port, _request(server, f"/vizviewer_info?token={_token(server)}"))
    assert answer.startswith(b"HTTP/1.0 200")  # the slots come back
