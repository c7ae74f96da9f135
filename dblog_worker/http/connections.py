"""How many connections the HTTP server keeps, and for how long it waits for a request.

A connection holds a thread of the server from accept to close. Two limits keep slow
or idle clients from holding all of them:

- :class:`Clients` admits at most ``total`` connections, at most ``per_peer`` from one
  address. When a new connection finds no room, the connection that has waited longest
  for its request (idle between keep-alive requests, or still sending one) is closed to
  make it; only when every connection in the way is being handled is the new one refused
  (``admit`` returns None: the server answers 503). A client that sends its request at
  once is therefore served unless that many requests are being handled at the same time.
- :class:`DeadlineReader` reads a request (request line, headers, body) against one
  deadline from its first byte, not a timeout per read: a client that sends a byte now
  and then cannot keep a connection past it.
"""

from __future__ import annotations

import contextlib
import io
import socket
import threading
import time
from dataclasses import dataclass

MAX_CONNECTIONS = 64  # connections at once
MAX_CONNECTIONS_PER_PEER = 16  # connections at once from one client address
IDLE_TIMEOUT_S = 10.0  # waiting for a request's first byte, and each write
REQUEST_DEADLINE_S = 10.0  # from a request's first byte to its last (line, headers, body)


@dataclass(eq=False)
class Connection:
    """One admitted connection: its socket, its client's address, since when it waits for
    its request (``handling``: a handler runs for it), and whether it was closed to make
    room."""

    sock: socket.socket
    peer: str
    since: float
    handling: bool = False
    evicted: bool = False


class Clients:
    """The admitted connections, by socket; every method is safe from any thread."""

    def __init__(self, total: int = MAX_CONNECTIONS,
                 per_peer: int = MAX_CONNECTIONS_PER_PEER) -> None:
        self.total = total
        self.per_peer = per_peer
        self._lock = threading.Lock()
        self._open: dict[socket.socket, Connection] = {}

    def admit(self, sock: socket.socket, peer: str) -> Connection | None:
        """Admit a new connection, closing the longest-waiting one in its way if it must;
        None: every connection in its way is being handled (refuse it)."""
        with self._lock:
            mine = [c for c in self._open.values() if c.peer == peer]
            if len(mine) >= self.per_peer:
                in_the_way = mine
            elif len(self._open) >= self.total:
                in_the_way = list(self._open.values())
            else:
                in_the_way = []
            if in_the_way:
                waiting = [c for c in in_the_way if not c.handling]
                if not waiting:
                    return None
                self._evict(min(waiting, key=lambda c: c.since))
            connection = Connection(sock, peer, time.monotonic())
            self._open[sock] = connection
            return connection

    def _evict(self, connection: Connection) -> None:
        connection.evicted = True
        del self._open[connection.sock]
        # Its thread, blocked reading, reads the end of the stream and closes the socket.
        with contextlib.suppress(OSError):
            connection.sock.shutdown(socket.SHUT_RDWR)

    def get(self, sock: socket.socket) -> Connection | None:
        with self._lock:
            return self._open.get(sock)

    def waiting(self, connection: Connection) -> None:
        """The connection waits for its next request."""
        with self._lock:
            connection.handling = False
            connection.since = time.monotonic()

    def handling(self, connection: Connection) -> bool:
        """Its request was read and is handled now (it cannot be closed to make room);
        False: it was closed already."""
        with self._lock:
            if connection.evicted:
                return False
            connection.handling = True
            return True

    def leave(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.pop(sock, None)

    def count(self, peer: str | None = None) -> int:
        with self._lock:
            return sum(1 for c in self._open.values() if peer is None or c.peer == peer)


class DeadlineReader(io.RawIOBase):
    """A socket's input for a buffered reader: before a request's first byte each read
    waits up to ``idle_s``; from it on, reads wait only until ``deadline_s`` after it.
    ``expired`` tells that the deadline passed, ``received`` how much of the request came."""

    def __init__(self, sock: socket.socket, idle_s: float = IDLE_TIMEOUT_S,
                 deadline_s: float = REQUEST_DEADLINE_S) -> None:
        super().__init__()
        self.sock = sock
        self.idle_s = idle_s
        self.deadline_s = deadline_s
        self.deadline: float | None = None
        self.received = 0
        self.expired = False

    def readable(self) -> bool:
        return True

    def next_request(self) -> None:
        """A new request: its deadline starts with its first byte."""
        self.deadline = None
        self.received = 0
        self.expired = False

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self.deadline is None:
            timeout = self.idle_s
        else:
            timeout = self.deadline - time.monotonic()
            if timeout <= 0:
                self.expired = True
                raise TimeoutError("the request was not sent in time")
        self.sock.settimeout(timeout)
        try:
            count = self.sock.recv_into(buffer)
        except TimeoutError:
            self.expired = self.deadline is not None
            raise
        finally:
            self.sock.settimeout(self.idle_s)  # for the answer's writes
        if count and self.deadline is None:
            self.deadline = time.monotonic() + self.deadline_s
        self.received += count
        return count
