"""Where the view server's connections wait, without a thread, until they send a request.

Any local process can open connections to 127.0.0.1, and a browser opens some ahead of need:
a connection that has sent nothing costs a file descriptor here, never a thread, so idle ones
cannot take the threads that serve requests (before: 250 idle connections of one client held
every slot, and 0 of 50 requests made next to them were answered). A connection leaves the
lobby when it sends its first byte (to a thread, :mod:`tokentrace.view.connections`), or:

* after :attr:`Lobby.idle_timeout_s` without a byte: ``408`` and closed;
* when its client (the peer's address) has more than :attr:`Lobby.per_client` waiting, the
  newest of them that sent nothing within :attr:`Lobby.grace_s`: ``503`` and closed (a request
  sent meanwhile is served: the bound is on idle connections, never on requests);
* past :attr:`Lobby.capacity` connections waiting in all, a new one is refused at once.

One thread (the accepting one) uses a lobby; :meth:`Lobby.close_all` may run in another once
that thread stopped.
"""

from __future__ import annotations

import dataclasses
import resource
import selectors
import socket
import time
from collections import deque

#: The longest a select waits while a connection with a request waits for a thread.
_READY_POLL_S = 0.01


@dataclasses.dataclass
class _Waiting:
    client: str
    since: float


def default_capacity() -> int:
    """Connections that may wait at once: 1024, or half the file descriptors this process may
    open when that is less (an ``accept`` out of them fails in a loop)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, min(1024, soft // 2)) if soft > 0 else 1024


class Lobby:
    """The connections accepted that have not sent a byte, and those that have and wait for a
    thread (:meth:`take_ready`), with the listening socket in one selector."""

    def __init__(self, listener, *, idle_timeout_s: float, per_client: int, grace_s: float = 0.5,
                 capacity: int | None = None) -> None:
        self.idle_timeout_s, self.per_client, self.grace_s = idle_timeout_s, max(1, per_client), grace_s
        self.capacity = capacity or default_capacity()
        self._selector = selectors.DefaultSelector()
        self._listener = listener
        self._selector.register(listener, selectors.EVENT_READ)
        self._waiting: dict[socket.socket, _Waiting] = {}  # in arrival order
        self._ready: deque[socket.socket] = deque()  # sent something, no thread yet
        self._closed = False

    def __len__(self) -> int:
        return len(self._waiting) + len(self._ready)

    def add(self, connection: socket.socket, client: str) -> bool:
        """Lets a new connection wait; False (nothing done) when the lobby is full."""
        if len(self) >= self.capacity:
            return False
        self._waiting[connection] = _Waiting(client, time.monotonic())
        try:
            self._selector.register(connection, selectors.EVENT_READ)
        except (OSError, ValueError):  # closed already: nothing to wait for
            del self._waiting[connection]
            return False
        return True

    def discard(self, connection: socket.socket) -> bool:
        """Forgets a connection (it is being closed); whether it was here."""
        was_waiting = self._waiting.pop(connection, None) is not None
        if was_waiting:
            self._unregister(connection)
        try:
            self._ready.remove(connection)
        except ValueError:
            return was_waiting
        return True

    def poll(self, timeout: float) -> bool:
        """Waits up to ``timeout`` seconds (less when a deadline comes sooner) for a new
        connection or a byte from a waiting one; those that sent one move to the ready queue.
        Returns whether a new connection can be accepted."""
        now = time.monotonic()
        if self._ready:
            timeout = min(timeout, _READY_POLL_S)
        for waiting in self._waiting.values():  # the oldest first: its deadline is the nearest
            timeout = min(timeout, waiting.since + self.idle_timeout_s - now)
            break
        if len(self._waiting) > self.per_client:
            timeout = min(timeout, self.grace_s / 4)
        accept = False
        for key, _ in self._selector.select(max(0.0, timeout)):
            if key.fileobj is self._listener:
                accept = True
            elif key.fileobj in self._waiting:
                self._ready.append(key.fileobj)  # tracked here before it leaves _waiting
                del self._waiting[key.fileobj]
                self._unregister(key.fileobj)
        return accept

    def take_ready(self) -> socket.socket | None:
        """The connection that sent its first byte longest ago (None: none did)."""
        return self._ready.popleft() if self._ready else None

    def put_back(self, connection: socket.socket) -> None:
        """A ready connection that found no thread: first in line for the next one."""
        self._ready.appendleft(connection)

    def expired(self) -> list[tuple[socket.socket, int]]:
        """Takes out and returns the connections to refuse now, with the status to answer:
        408 for those idle past the timeout, 503 for the newest of a client over its bound that
        sent nothing in the grace time."""
        now = time.monotonic()
        out = [(c, 408) for c, w in self._waiting.items() if now - w.since >= self.idle_timeout_s]
        for connection, _ in out:
            self.discard(connection)
        by_client: dict[str, list[socket.socket]] = {}
        for connection, waiting in self._waiting.items():
            by_client.setdefault(waiting.client, []).append(connection)
        for connections in by_client.values():
            excess = len(connections) - self.per_client
            for connection in reversed(connections):
                if excess <= 0:
                    break
                if now - self._waiting[connection].since >= self.grace_s:
                    out.append((connection, 503))
                    self.discard(connection)
                    excess -= 1
        return out

    def close_all(self) -> list[socket.socket]:
        """Takes out every connection (to be closed by the caller)."""
        connections = [*self._waiting, *self._ready]
        for connection in connections:
            self.discard(connection)
        return connections

    def close(self) -> None:
        """Closes the selector (the connections stay: :meth:`close_all` first)."""
        self._closed = True
        self._selector.close()

    def _unregister(self, connection: socket.socket) -> None:
        if self._closed:
            return
        try:
            self._selector.unregister(connection)
        except (KeyError, ValueError, OSError):  # closed (fileno -1) or never registered
            pass
