"""The connections of the view server: a thread each once it sends a request, bounded in number
and in idle time, all ended by :meth:`Connections.end_connections` when the server stops.

Any local process can connect to 127.0.0.1 (the token is checked only once a request is read),
so what a connection costs is bounded before that. A connection that has sent nothing waits in
the :class:`~tokentrace.view.lobby.Lobby`, without a thread: idle past :data:`IDLE_TIMEOUT_S` it
gets ``408``, and past :data:`MAX_PER_CLIENT` idle connections of one client the newest get
``503`` (so idle connections never hold the server from requests). A request is served by one of
at most :data:`MAX_CONNECTIONS` threads (a socket timeout on every read and write); when all are
taken and a request waits, the thread that has been reading a request longest (past
:data:`EVICT_AFTER_S`: a client that sends a byte now and then) loses its connection.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import sys
import threading
import time
from http.server import ThreadingHTTPServer

from tokentrace.view.headers import raw_answer
from tokentrace.view.lobby import Lobby

#: Seconds a connection may sit without a byte read or written (a browser opens a new one).
IDLE_TIMEOUT_S = 30.0
#: Connections served at once (a browser opens about 6 per server; the UI loads in parallel).
MAX_CONNECTIONS = 64
#: Idle connections (nothing sent yet) one client (peer address) may hold open.
MAX_PER_CLIENT = 64
#: A thread reading one request for longer than this may lose it to a request that waits.
EVICT_AFTER_S = 1.0
#: How long a closing connection waits for the client's unread bytes (so that the close is not a
#: reset that loses the answer just sent, a 414 for a too long URL).
_LINGER_S = 0.5
_LINGER_BYTES = 1 << 20
#: errnos of a connection the other end (or :meth:`Connections.end_connections`) ended.
DROPPED = {errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.EBADF, errno.ESHUTDOWN}
_ANSWERS = {
    503: raw_answer(503, "Service Unavailable", "too many connections; try again soon"),
    408: raw_answer(408, "Request Timeout", "no request came; open a new connection"),
}


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
    #: The listen backlog: a burst of connections (the UI's parallel fetches) waits in the kernel
    #: while this thread has no turn; past the backlog a connection waits a second per retry.
    request_queue_size = 512

    def __init__(self, address, handler, *, max_connections: int = MAX_CONNECTIONS,
                 on_refused=None, idle_timeout_s: float | None = None,
                 max_per_client: int | None = None) -> None:
        self._open: dict[socket.socket, threading.Thread] = {}  # taken by its thread
        self._starting: set[socket.socket] = set()  # accepted, its thread not yet running
        self._reading: dict[socket.socket, float] = {}  # taken, reading a request since
        self._open_lock = threading.Lock()
        self._max = max(1, max_connections)  # the slots: _open and _starting together
        self._on_refused = on_refused
        self._stop_asked, self._stopped = False, threading.Event()
        super().__init__(address, handler)  # binds and listens
        self.lobby = Lobby(self, idle_timeout_s=IDLE_TIMEOUT_S if idle_timeout_s is None else idle_timeout_s,
                           per_client=MAX_PER_CLIENT if max_per_client is None else max_per_client)

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Accepts connections, hands those that sent a request to threads and refuses the
        idle ones past their bounds (:class:`~tokentrace.view.lobby.Lobby`), until
        :meth:`shutdown` (from another thread) or an exception (a signal in the main thread)."""
        self._stopped.clear()
        try:
            while not self._stop_asked:
                accept = self.lobby.poll(poll_interval)
                if self._stop_asked:
                    break
                if accept:
                    self._handle_request_noblock()  # process_request: into the lobby
                self._dispatch()
                for connection, status in self.lobby.expired():
                    self._refuse(connection, status)
                self.service_actions()
        finally:
            self._stop_asked = False
            self._stopped.set()

    def shutdown(self) -> None:
        """Stops :meth:`serve_forever` (running in another thread) and waits for it."""
        self._stop_asked = True
        self._stopped.wait()

    def process_request(self, request, client_address) -> None:
        """A new connection waits in the lobby, or is refused when the lobby is full. Raising
        (a signal), socketserver calls :meth:`shutdown_request`."""
        if not self.lobby.add(request, client_address[0]):
            self._refuse(request, 503)

    def _refuse(self, request, status: int) -> None:
        """Answers ``status`` and closes, from the accepting thread: never waits."""
        with contextlib.suppress(OSError):
            request.setblocking(False)
            request.send(_ANSWERS[status])
        self.shutdown_request(request, linger=False)
        if status == 503 and self._on_refused is not None:
            self._on_refused()

    def _dispatch(self) -> None:
        """Starts a thread for each connection that sent something, while slots are free; a
        request that finds none waits (and may take the slot of a thread stuck reading)."""
        while (request := self.lobby.take_ready()) is not None:
            if _closed_by_peer(request):
                self.shutdown_request(request, linger=False)
                continue
            with self._open_lock:
                admitted = len(self._open) + len(self._starting) < self._max
                if admitted:
                    self._starting.add(request)
            if not admitted:
                self.lobby.put_back(request)
                self._evict_a_slow_reader()
                return
            try:
                threading.Thread(target=self._serve, args=(request, request_peer(request)),
                                 daemon=self.daemon_threads).start()
            except BaseException:
                self.shutdown_request(request)  # closes it unless its thread took it
                raise

    def _evict_a_slow_reader(self) -> None:
        """Ends the connection whose thread has been reading one request longest, past
        :data:`EVICT_AFTER_S` (its thread then ends and frees the slot)."""
        now = time.monotonic()
        with self._open_lock:
            slow = [(since, c) for c, since in self._reading.items() if now - since >= EVICT_AFTER_S]
            if not slow:
                return
            _, connection = min(slow, key=lambda item: item[0])
            del self._reading[connection]
        with contextlib.suppress(OSError):
            connection.shutdown(socket.SHUT_RDWR)

    def reading(self, request, started: bool) -> None:
        """Called by a connection's thread: it starts (or has finished) reading a request."""
        with self._open_lock:
            if started:
                self._reading[request] = time.monotonic()
            else:
                self._reading.pop(request, None)

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
                self._reading.pop(request, None)

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
        if owner is None and self.lobby.discard(request):  # (the lobby is the accepting thread's)
            linger = False  # never taken: nothing was sent
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
            return len(self._open) + len(self._starting) + len(self.lobby)

    def end_connections(self, timeout: float) -> None:
        """Shuts every open connection down (a transfer stops at its next write), closes those
        whose thread has not taken them yet, and waits up to ``timeout`` seconds for the
        threads."""
        with self._open_lock:
            open_now = dict(self._open)
            starting, self._starting = self._starting, set()
        for connection in [*starting, *self.lobby.close_all()]:  # threads, if any, leave them alone
            self.shutdown_request(connection, linger=False)
        for connection in open_now:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # closed meanwhile
        deadline = time.monotonic() + timeout
        for thread in open_now.values():
            thread.join(max(0.0, deadline - time.monotonic()))

    def server_close(self) -> None:
        """Stops listening (the connections open stay: :meth:`end_connections`)."""
        super().server_close()
        lobby = getattr(self, "lobby", None)  # None: the bind failed, in __init__
        if lobby is not None:
            lobby.close()

    def handle_error(self, request, client_address) -> None:
        """A connection the browser dropped (a tab closed, a transfer cut by
        :meth:`end_connections`, an idle one timed out) is not worth a traceback on the
        terminal; another error gets one line."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError) and (isinstance(error, (ConnectionError, TimeoutError))
                                           or error.errno in DROPPED):
            return
        print(f"error: request from {client_address[0]} failed: {error!r}", file=sys.stderr)


def request_peer(request: socket.socket) -> tuple[str, int]:
    """The peer's address, or a placeholder for a connection already reset."""
    try:
        return request.getpeername()[:2]
    except OSError:
        return ("-", 0)


def _closed_by_peer(request: socket.socket) -> bool:
    """Whether the first "byte" of a waiting connection is its end (the client closed it)."""
    try:
        return request.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
