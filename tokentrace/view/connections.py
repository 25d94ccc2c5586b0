"""The connections of the view server: one thread each, bounded in number and in idle time, all
ended by :meth:`Connections.end_connections` when the server stops.

Any local process can connect to 127.0.0.1 (the token is checked only once a request is read),
so what a connection costs is bounded before that: a connection idle for
:data:`IDLE_TIMEOUT_S` is closed (a socket timeout on every read and write), and past
:data:`MAX_CONNECTIONS` open at once a new one gets ``503`` and is closed at once, from the
accepting thread, without a thread of its own.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import sys
import threading
import time
from http.server import ThreadingHTTPServer

#: Seconds a connection may sit without a byte read or written (a browser opens a new one).
IDLE_TIMEOUT_S = 30.0
#: Connections served at once (a browser opens about 6 per server; the UI loads in parallel).
MAX_CONNECTIONS = 64
#: How long a closing connection waits for the client's unread bytes (so that the close is not a
#: reset that loses the answer just sent, a 414 for a too long URL).
_LINGER_S = 0.5
_LINGER_BYTES = 1 << 20
#: errnos of a connection the other end (or :meth:`Connections.end_connections`) ended.
DROPPED = {errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.EBADF, errno.ESHUTDOWN}
_BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
         b"Content-Length: 37\r\n\r\ntoo many connections; try again soon\n")


class Connections(ThreadingHTTPServer):
    """One thread per connection (daemons: never in the way of the process's exit), at most
    ``max_connections`` of them, each connection known until it ends, so that
    :meth:`end_connections` can cut them.

    A connection belongs to the accepting thread until its own thread takes it (under
    ``_open_lock``), and its slot is that membership, freed once: a signal can stop the
    accepting thread (``serve_forever`` in the main thread, Ctrl+C) inside ``Thread.start()``
    while the new thread already runs, and socketserver then calls :meth:`shutdown_request` from
    the accepting thread. That call closes a connection no thread has taken yet (its thread, if
    it runs later, leaves it alone) and leaves a taken one to its thread: a connection is never
    closed under the thread writing to it, and a slot never freed twice (a ``ValueError``
    traceback on the terminal)."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address, handler, *, max_connections: int = MAX_CONNECTIONS,
                 on_refused=None) -> None:
        self._open: dict[socket.socket, threading.Thread] = {}  # taken by its thread
        self._starting: set[socket.socket] = set()  # accepted, its thread not yet running
        self._open_lock = threading.Lock()
        self._max = max(1, max_connections)  # the slots: _open and _starting together
        self._on_refused = on_refused
        super().__init__(address, handler)  # binds and listens

    def process_request(self, request, client_address) -> None:
        """Starts the connection's thread, or refuses it when all slots are taken. Raising
        (a signal, or no thread to be had), socketserver calls :meth:`shutdown_request`."""
        with self._open_lock:
            admitted = len(self._open) + len(self._starting) < self._max
            if admitted:
                self._starting.add(request)
        if not admitted:
            with contextlib.suppress(OSError):
                request.setblocking(False)  # never wait here: this is the accepting thread
                request.send(_BUSY)
            self.shutdown_request(request, linger=False)
            if self._on_refused is not None:
                self._on_refused()
            return
        threading.Thread(target=self._serve, args=(request, client_address),
                         daemon=self.daemon_threads).start()

    def _serve(self, request, client_address) -> None:
        """The connection's thread: takes it, unless the accepting thread (stopped meanwhile)
        or :meth:`end_connections` already closed it."""
        with self._open_lock:
            if request not in self._starting:
                return  # closed before this thread ran: nothing to serve, no slot to free
            self._starting.discard(request)
            self._open[request] = threading.current_thread()
        try:
            self.process_request_thread(request, client_address)  # handle_error, shutdown_request
        finally:
            with self._open_lock:
                self._open.pop(request, None)

    def shutdown_request(self, request, linger: bool = True) -> None:
        """Closes a connection after reading what the client still sends, for a moment: a
        close with unread bytes is a reset, which can lose the answer (a 414) on its way.

        From another thread than the one that took it (the accepting thread after a signal),
        nothing: its thread ends it. One not yet taken is closed at once (nothing was sent)."""
        with self._open_lock:
            owner = self._open.get(request)
            if request in self._starting:
                self._starting.discard(request)
                linger = False
        if owner is not None and owner is not threading.current_thread():
            return
        with contextlib.suppress(OSError):
            request.shutdown(socket.SHUT_WR)
            if linger:
                request.settimeout(_LINGER_S)
                deadline, read = time.monotonic() + _LINGER_S, 0
                while read < _LINGER_BYTES and time.monotonic() < deadline:
                    data = request.recv(65536)
                    if not data:
                        break
                    read += len(data)
        self.close_request(request)

    def open_connections(self) -> int:
        """Connections being served now (or about to be, their threads starting)."""
        with self._open_lock:
            return len(self._open) + len(self._starting)

    def end_connections(self, timeout: float) -> None:
        """Shuts every open connection down (a transfer stops at its next write), closes those
        whose thread has not taken them yet, and waits up to ``timeout`` seconds for the
        threads."""
        with self._open_lock:
            open_now = dict(self._open)
            starting, self._starting = self._starting, set()
        for connection in starting:  # their threads, if they run at all, leave them alone
            self.shutdown_request(connection, linger=False)
        for connection in open_now:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # closed meanwhile
        deadline = time.monotonic() + timeout
        for thread in open_now.values():
            thread.join(max(0.0, deadline - time.monotonic()))

    def handle_error(self, request, client_address) -> None:
        """A connection the browser dropped (a tab closed, a transfer cut by
        :meth:`end_connections`, an idle one timed out) is not worth a traceback on the
        terminal; another error gets one line."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError) and (isinstance(error, (ConnectionError, TimeoutError))
                                           or error.errno in DROPPED):
            return
        print(f"error: request from {client_address[0]} failed: {error!r}", file=sys.stderr)
