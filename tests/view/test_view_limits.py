"""What the view server does with connections that are idle, slow or not HTTP/1.x (issue 48):
idle ones wait without a thread, time out and never hold requests back; a request line that is
not ``METHOD PATH HTTP/1.x`` gets 400 or 505 with a status line; every answer forbids framing.
Every client here talks to 127.0.0.1 with socket timeouts of a few seconds."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from tokentrace.view import TraceServer, connections
from tokentrace.view.headers import CONTENT_SECURITY_POLICY


@pytest.fixture
def small_trace(tmp_path) -> Path:
    trace = tmp_path / "small.json"
    trace.write_bytes(b'{"traceEvents": []}')
    return trace


def _exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Sends ``data``; returns all that comes back until the server closes (or ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as client:
        client.sendall(data)
        received, deadline = b"", time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = client.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            received += chunk
        return received


def _get(server, path: str) -> bytes:
    return (f"GET {path}{'&' if '?' in path else '?'}token={server.token} HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{server.port}\r\nConnection: close\r\n\r\n").encode()


def _headers(answer: bytes) -> dict[str, str]:
    head = answer.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")[1:]
    return {name.strip().lower(): value.strip() for name, _, value in (h.partition(":") for h in head)}


def test_idle_connections_never_starve_requests(small_trace, monkeypatch):
    """250 idle connections of one client, then 50 requests at once: every request is answered
    (before: 0 of 50), the idle ones past the per-client bound are refused and the rest time out."""
    monkeypatch.setattr(connections, "IDLE_TIMEOUT_S", 3.0)
    with TraceServer(small_trace, 0).start() as server:
        idle = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(250)]
        try:
            answers: list[bytes] = []

            def request() -> None:
                answers.append(_exchange(server.port, _get(server, "/vizviewer_info"), timeout=10)[:12])

            clients = [threading.Thread(target=request) for _ in range(50)]
            start = time.monotonic()
            for client in clients:
                client.start()
            for client in clients:
                client.join(30)
            assert answers == [b"HTTP/1.0 200"] * 50
            assert time.monotonic() - start < 10
            # the newest idle ones past MAX_PER_CLIENT got 503 after the grace time ...
            closed_at, ends = time.monotonic(), []
            for sock in idle:
                sock.settimeout(max(0.1, closed_at + 8 - time.monotonic()))
                try:
                    ends.append(sock.recv(200)[:12])
                except TimeoutError:
                    ends.append(b"still open")
            assert ends.count(b"HTTP/1.0 503") == 250 - connections.MAX_PER_CLIENT
            # ... and the others 408 once idle past the timeout: none is left open
            assert ends.count(b"HTTP/1.0 408") == connections.MAX_PER_CLIENT, set(ends)
            assert server._httpd.open_connections() == 0
        finally:
            for sock in idle:
                sock.close()


def test_threads_stuck_reading_a_request_give_way(small_trace, monkeypatch):
    """Every thread taken by a client that sent a byte and stopped: a real request still gets
    its answer, from the slot of the one stuck longest."""
    monkeypatch.setattr(connections, "MAX_CONNECTIONS", 4)
    monkeypatch.setattr(connections, "EVICT_AFTER_S", 0.3)
    with TraceServer(small_trace, 0).start() as server:
        stuck = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(4)]
        try:
            for sock in stuck:
                sock.sendall(b"G")
            time.sleep(0.5)
            start = time.monotonic()
            answer = _exchange(server.port, _get(server, "/vizviewer_info"))
            assert answer.startswith(b"HTTP/1.0 200") and time.monotonic() - start < 3
        finally:
            for sock in stuck:
                sock.close()


@pytest.mark.parametrize(("line", "status"), [
    (b"GET / HTTP/1.x\r\n\r\n", 400),
    (b"GET / HTTPS/1.1\r\n\r\n", 400),
    (b"GET\r\n\r\n", 400),
    (b"hello\r\n\r\n", 400),
    (b"\r\n\r\n", 400),
    (b"GET /\r\n", 400),  # HTTP/0.9: before, an answer without status line nor headers
    (b"GET / please HTTP/1.1\r\n\r\n", 400),
    (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),  # the HTTP/2 preface (prior knowledge)
    (b"GET / HTTP/3.0\r\n\r\n", 505),
    (b"GET / HTTP/0.9\r\n\r\n", 505),
], ids=["bad-version", "bad-protocol", "one-word", "one-other-word", "empty", "http-0.9",
        "four-words", "http2-preface", "http-3", "http-0.9-named"])
def test_a_malformed_request_line_gets_an_http_error(small_trace, line, status):
    lines: list[str] = []
    with TraceServer(small_trace, 0, log=lines.append).start() as server:
        start = time.monotonic()
        answer = _exchange(server.port, line)
        assert answer.startswith(f"HTTP/1.0 {status} ".encode()), answer[:200]
        assert time.monotonic() - start < 3  # at once, not after the idle timeout
        assert _headers(answer)["x-frame-options"] == "DENY"
        time.sleep(0.1)
    assert len(lines) == 1 and lines[0].endswith(f" {status}"), lines


def test_every_answer_forbids_framing(small_trace, monkeypatch):
    """200, 403, 404, a malformed line's 400, the 503 of a refused connection and the 408 of an
    idle one: each carries ``frame-ancestors 'none'`` and ``X-Frame-Options: DENY``, and the
    policy keeps what lets the UI load its own scripts, workers and wasm."""
    monkeypatch.setattr(connections, "IDLE_TIMEOUT_S", 1.0)
    monkeypatch.setattr(connections, "MAX_PER_CLIENT", 1)
    assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
    for kept in ("default-src 'self'", "'wasm-unsafe-eval'", "worker-src 'self' blob:",
                 "connect-src 'self' blob: data: http://127.0.0.1:9001", "object-src 'none'"):
        assert kept in CONTENT_SECURITY_POLICY
    with TraceServer(small_trace, 0).start() as server:
        answers = {
            200: _exchange(server.port, _get(server, "/")),
            403: _exchange(server.port, f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n".encode()),
            404: _exchange(server.port, _get(server, "/no-such-file")),
            400: _exchange(server.port, b"GET\r\n\r\n"),
        }
        first = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        second = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        with first, second:
            answers[503] = second.recv(4096)  # the newest over the bound of 1, after the grace
            answers[408] = first.recv(4096)  # idle past the timeout
    for status, answer in answers.items():
        assert answer.startswith(f"HTTP/1.0 {status} ".encode()), (status, answer[:200])
        headers = _headers(answer)
        assert headers["x-frame-options"] == "DENY", status
        assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY, status
