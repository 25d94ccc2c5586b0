"""The remote backend: an already running trace processor server (``trace_processor_shell -D``).

Through the ``perfetto`` package's HTTP client. With a trace path, the trace is sent to the
server; without one, the server's own trace is queried. The bundled ``tokentrace`` SQL modules
are registered over the server's ``/rpc`` endpoint (``TPM_REGISTER_SQL_PACKAGE``).
"""

from __future__ import annotations

import http.client
import re
import socket
from pathlib import Path

from tokentrace.engine.base import Engine, feed_trace
from tokentrace.errors import EngineError

_ADDRESS = re.compile(r"^(?:https?://)?([A-Za-z0-9.\-\[\]:]+):(\d{1,5})/?$")
CONNECT_TIMEOUT_S = 5.0
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


def start_remote(trace: Path | None, address: str | None) -> Engine:
    """Connects to the server, registers the bundled SQL, loads ``trace`` when given."""
    from perfetto.trace_processor.http import TraceProcessorHttp
    from perfetto.trace_processor.platform import PlatformDelegate
    from perfetto.trace_processor.protos import ProtoFactory

    host, port = parse_address(address)
    _check_reachable(host, port)
    protos = ProtoFactory(PlatformDelegate())
    client = TraceProcessorHttp(f"{host}:{port}", protos=protos)
    client.conn.timeout = 600
    engine = Engine(client, "remote", f"server {host}:{port}", trace)
    try:
        _register_sql(host, port, protos)
        if trace is not None:
            engine.load = feed_trace(client, trace)
    except (OSError, http.client.HTTPException) as exc:
        engine.close()
        raise EngineError(f"trace processor server {host}:{port} failed: {exc}") from None
    except BaseException:
        engine.close()
        raise
    return engine


def _register_sql(host: str, port: int, protos) -> None:
    """Posts one TPM_REGISTER_SQL_PACKAGE request to ``/rpc``; a server without it is told."""
    from tokentrace.catalog import SQL_PACKAGE, module_sources
    from tokentrace.engine.rpc import LoadingRpc

    transport = _HttpRpcTransport(host, port)
    error = LoadingRpc(transport, protos).register_sql_package(SQL_PACKAGE, module_sources())
    if error:
        raise EngineError(f"the server at {host}:{port} refused the tokentrace SQL modules: "
                          f"{error}")


class _HttpRpcTransport:
    """One request/response pair over the server's ``POST /rpc`` (the reply is the byte stream
    of framed messages)."""

    def __init__(self, host: str, port: int):
        self._conn = http.client.HTTPConnection(host, port, timeout=60)
        self._reply = b""

    def send(self, data: bytes) -> None:
        self._conn.request("POST", "/rpc", body=data)
        with self._conn.getresponse() as response:
            if response.status != 200:
                raise EngineError(f"/rpc answered HTTP {response.status}")
            self._reply = response.read()

    def read(self, size: int) -> bytes:
        if len(self._reply) < size:
            raise EngineError("the trace processor server closed the /rpc reply early")
        data, self._reply = self._reply[:size], self._reply[size:]
        return data

    def close(self) -> None:
        self._conn.close()
