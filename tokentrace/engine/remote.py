"""The remote backend: an already running trace processor server (``trace_processor_shell -D``).

Everything goes through the server's ``POST /rpc`` endpoint with our RPC client
(:mod:`tokentrace.engine.rpc`): loading (``TPM_APPEND_TRACE_DATA``, then
``TPM_FINALIZE_TRACE_DATA``, whose error is checked), the caller's SQL packages
(``TPM_REGISTER_SQL_PACKAGE``) and queries. With a trace path the trace is sent to the server;
without one, the server's own trace is queried. The native backend reuses this transport for
the shell it starts.
"""

from __future__ import annotations

import http.client
import re
import socket
from collections.abc import Sequence
from pathlib import Path

from tokentrace.engine.base import Engine, feed_trace
from tokentrace.engine.packages import SqlPackage, register_packages
from tokentrace.engine.rpc import ReplyBuffer, RpcClient
from tokentrace.errors import EngineError

_ADDRESS = re.compile(r"^(?:https?://)?([A-Za-z0-9.\-\[\]:]+):(\d{1,5})/?$")
CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 600.0  # one request may be a long query or a 16 MiB chunk to parse
START_HINT = "start one with `trace_processor_shell --httpd [TRACE]` (listens on 127.0.0.1:9001)"


def parse_address(address: str | None) -> tuple[str, int]:
    """``host:port`` -> (host, port); anything else -> EngineError."""
    match = _ADDRESS.match(address or "")
    if not match or not 0 < int(match.group(2)) < 65536:
        raise EngineError(f"--address {address!r}: expected host:port of a running trace "
                          f"processor server; {START_HINT}")
    return match.group(1), int(match.group(2))


def _check_reachable(host: str, port: int) -> None:
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise EngineError(f"no trace processor server at {host}:{port} "
                          f"({exc.strerror or exc}); {START_HINT}") from None


def start_remote(trace: Path | None, address: str | None,
                 packages: Sequence[SqlPackage] = ()) -> Engine:
    """Connects to the server, loads ``trace`` when given, registers ``packages``.

    Raises:
        EngineError: no server there, it fails, or it refuses the trace or a package.
    """
    host, port = parse_address(address)
    _check_reachable(host, port)
    client = RpcClient(HttpRpcTransport(host, port))
    engine = Engine(client, "remote", f"server {host}:{port}", trace)
    try:
        load_and_register(engine, client, trace, packages, f"the server at {host}:{port}")
    except BaseException:
        engine.close()
        raise
    return engine


def load_and_register(engine: Engine, client: RpcClient, trace: Path | None,
                      packages: Sequence[SqlPackage], where: str) -> None:
    """Loads ``trace`` (when given), then registers ``packages``, over HTTP.

    Packages come after the trace: a server that already held a trace starts a fresh trace
    processor on the first new chunk, which would drop packages registered before it.

    Raises:
        EngineError: also for transport failures, naming ``where``.
    """
    try:
        if trace is not None:
            engine.load = feed_trace(client, trace)
        register_packages(client, packages, where)
    except (OSError, http.client.HTTPException) as exc:
        raise EngineError(f"{where} failed: {str(exc) or type(exc).__name__}") from None


class HttpRpcTransport:
    """The RPC transport over ``POST /rpc``: each request is one HTTP request, whose reply
    body is the (chunked) stream of framed reply messages.

    Args:
        host, port: the server.
        timeout: seconds one request may take.
    """

    def __init__(self, host: str, port: int, timeout: float = REQUEST_TIMEOUT_S):
        self.address = f"{host}:{port}"
        self._conn = http.client.HTTPConnection(host, port, timeout=timeout)
        self._replies = ReplyBuffer()

    def send(self, data: bytes) -> None:
        """Posts one request and keeps its whole reply for :meth:`read`."""
        self._replies.clear()  # a reply is read whole before the next request goes out
        self._conn.request("POST", "/rpc", body=data,
                           headers={"Content-Type": "application/x-protobuf"})
        with self._conn.getresponse() as response:
            body = response.read()
            if response.status != 200:
                raise EngineError(f"{self.address}/rpc answered HTTP {response.status} "
                                  f"{response.reason}")
        self._replies.append(body)

    def read(self, size: int) -> bytes:
        """The next ``size`` reply bytes; a reply that ends early is an error."""
        if size > self._replies.available():
            raise EngineError(f"the trace processor server {self.address} closed the /rpc "
                              "reply early")
        return self._replies.take(size)

    def close(self) -> None:
        """Closes the connection (the server and its trace stay); one never opened is fine."""
        if getattr(self, "_conn", None) is not None:
            self._conn.close()
