"""How many connections the HTTP server keeps, and for how long it waits for a client.

A connection holds a thread of the server from accept to close. These limits keep slow,
idle or hostile clients from holding all of them:

- :class:`Clients` admits at most ``total`` connections, at most ``per_peer`` from one
  address. When a new connection finds no room, the connection that has waited longest
  for its request (idle between keep-alive requests, or still sending one) is closed to
  make it. Only when every connection in the way is being handled does the new one get
  one of the ``reserved`` places, kept for the probes: such a connection is answered one
  request, ``/healthz`` or ``/readyz`` (anything else: 503), then closed; when those are
  taken too, a reserved connection still waiting for its request is closed to make room,
  and only then is the new one refused (``admit`` returns None: the server answers 503).
- :class:`DeadlineReader` reads a request (request line, headers, body) against one
  deadline from its first byte, not a timeout per read: a client that sends a byte now
  and then cannot keep a connection past it.
- :class:`DeadlineWriter` writes each answer against one deadline from its first byte: a
  client that does not read its answers (pipelined requests it never reads back) has the
  connection closed then, not after a timeout per write. The kernel keeps at most
  :data:`SEND_BUFFER_BYTES` (Linux: twice that) of a connection's answers, so such a client
  cannot pin megabytes of memory per connection either. The server also closes a
  connection after :data:`MAX_PIPELINED` requests in a row that were sent before their
  predecessor's answer.
- :class:`AuthFailures` slows down the answers to a wrong token, per client address
  (bounded memory): a client that guesses waits longer each time.
"""

from __future__ import annotations

import collections
import contextlib
import io
import socket
import threading
import time
from dataclasses import dataclass, field

MAX_CONNECTIONS = 64  # connections at once
MAX_CONNECTIONS_PER_PEER = 16  # connections at once from one client address
RESERVED_CONNECTIONS = 8  # beyond those, for /healthz and /readyz while all are busy
IDLE_TIMEOUT_S = 10.0  # waiting for a request's first byte
REQUEST_DEADLINE_S = 10.0  # from a request's first byte to its last (line, headers, body)
RESPONSE_DEADLINE_S = 10.0  # from an answer's first byte to its last
SEND_BUFFER_BYTES = 128 * 1024  # the kernel's buffer of each connection's answers (SO_SNDBUF)
MAX_PIPELINED = 16  # requests in a row sent before their predecessor's answer: then close
FREE_AUTH_FAILURES = 10  # wrong tokens from one address answered at once
AUTH_DELAY_S = (0.1, 5.0)  # then the first delay, doubling to the longest
AUTH_FORGET_S = 30.0  # an address's count of failures drops by one each 30 s
AUTH_PEERS = 4096  # addresses whose failures are remembered (the least recent forgotten)


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
    reserved: bool = False  # a place kept for the probes: one /healthz or /readyz, no more
    gone: threading.Event = field(default_factory=threading.Event)  # set when evicted


class Clients:
    """The admitted connections, by socket; every method is safe from any thread."""

    def __init__(self, total: int = MAX_CONNECTIONS,
                 per_peer: int = MAX_CONNECTIONS_PER_PEER,
                 reserved: int = RESERVED_CONNECTIONS) -> None:
        self.total = total
        self.per_peer = per_peer
        self.reserved = reserved
        self._lock = threading.Lock()
        self._open: dict[socket.socket, Connection] = {}

    def admit(self, sock: socket.socket, peer: str) -> Connection | None:
        """Admit a new connection, closing the longest-waiting one in its way if it must,
        on a reserved place if every one in its way is being handled; None: the reserved
        places are being handled too (refuse it)."""
        with self._lock:
            general = [c for c in self._open.values() if not c.reserved]
            mine = [c for c in general if c.peer == peer]
            if len(mine) >= self.per_peer:
                in_the_way = mine
            elif len(general) >= self.total:
                in_the_way = general
            else:
                in_the_way = []
            reserved = False
            if in_the_way:
                waiting = [c for c in in_the_way if not c.handling]
                if waiting:
                    self._evict(min(waiting, key=lambda c: c.since))
                else:
                    kept = [c for c in self._open.values() if c.reserved]
                    if len(kept) >= self.reserved:
                        idle = [c for c in kept if not c.handling]
                        if not idle:
                            return None
                        self._evict(min(idle, key=lambda c: c.since))
                    reserved = True
            connection = Connection(sock, peer, time.monotonic(), reserved=reserved)
            self._open[sock] = connection
            return connection

    def _evict(self, connection: Connection) -> None:
        connection.evicted = True
        connection.gone.set()  # a wait before a wrong token's answer ends at once
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

    def count(self, peer: str | None = None, reserved: bool = False) -> int:
        """The connections open (from ``peer``), on general places or on reserved ones."""
        with self._lock:
            return sum(1 for c in self._open.values()
                       if (peer is None or c.peer == peer) and c.reserved == reserved)


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
        self._probing = False

    def readable(self) -> bool:
        return True

    def pending(self, buffered: io.BufferedReader[DeadlineReader]) -> bool:
        """Whether the next request has begun to arrive already (in ``buffered``, the
        reader over this one, or in the socket): without waiting for it."""
        self._probing = True
        try:
            return bool(buffered.peek(1))
        except OSError:
            return False
        finally:
            self._probing = False

    def next_request(self) -> None:
        """A new request: its deadline starts with its first byte."""
        self.deadline = None
        self.received = 0
        self.expired = False

    def readinto(self, buffer: memoryview) -> int | None:  # type: ignore[override]
        if self._probing:
            try:
                count = self.sock.recv_into(buffer, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None  # nothing yet: BufferedReader.peek gives b""
            self.received += count
            return count
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


class DeadlineWriter(io.BufferedIOBase):
    """A socket's output for the answers: each answer (status line, headers, body) must be
    taken by the client within ``deadline_s`` of its first byte; past it, a write raises
    TimeoutError and ``expired`` tells so (the connection is to be closed)."""

    def __init__(self, sock: socket.socket, deadline_s: float | None = None) -> None:
        super().__init__()
        self.sock = sock
        self.deadline_s = RESPONSE_DEADLINE_S if deadline_s is None else deadline_s
        self.deadline: float | None = None
        self.expired = False

    def writable(self) -> bool:
        return True

    def next_response(self) -> None:
        """A new answer: its deadline starts with its first byte."""
        self.deadline = None

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(data).cast("B")
        if self.deadline is None:
            self.deadline = time.monotonic() + self.deadline_s
        sent = 0
        try:
            while sent < len(view):
                left = self.deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the client did not read the answer in time")
                self.sock.settimeout(left)
                sent += self.sock.send(view[sent:])
        except TimeoutError:
            self.expired = True
            raise
        finally:
            self.sock.settimeout(IDLE_TIMEOUT_S)
        return sent


class AuthFailures:
    """Wrong tokens per client address: the first :data:`FREE_AUTH_FAILURES` are answered at
    once, each further one after a delay that doubles up to ``AUTH_DELAY_S[1]``. The count
    drops by one every :data:`AUTH_FORGET_S`; at most ``peers`` addresses are remembered (the
    least recent forgotten first), so a flood of addresses cannot grow the memory."""

    def __init__(self, peers: int = AUTH_PEERS) -> None:
        self.peers = peers
        self._lock = threading.Lock()
        self._failures: collections.OrderedDict[str, tuple[float, float]] = (
            collections.OrderedDict())

    def failed(self, peer: str) -> float:
        """Count a wrong token from ``peer``; how long to wait before answering it."""
        now = time.monotonic()
        with self._lock:
            count, at = self._failures.pop(peer, (0.0, now))
            count = max(0.0, count - (now - at) / AUTH_FORGET_S) + 1
            self._failures[peer] = (count, now)
            while len(self._failures) > self.peers:
                self._failures.popitem(last=False)
        over = count - FREE_AUTH_FAILURES
        if over <= 0:
            return 0.0
        first, longest = AUTH_DELAY_S
        return float(min(longest, first * 2 ** (over - 1)))

    def __len__(self) -> int:
        with self._lock:
            return len(self._failures)
