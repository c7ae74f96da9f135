"""The HTTP server's connection limits and request deadline, on real socket pairs."""

from __future__ import annotations

import io
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from dblog_worker.http.connections import (
    AUTH_DELAY_S,
    FREE_AUTH_FAILURES,
    AuthFailures,
    Clients,
    DeadlineReader,
    DeadlineWriter,
)


@pytest.fixture
def pairs() -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    made: list[tuple[socket.socket, socket.socket]] = []
    yield made
    for server, client in made:
        server.close()
        client.close()


def pair(made: list[tuple[socket.socket, socket.socket]]) -> tuple[socket.socket, socket.socket]:
    """(the server's end, the client's end)"""
    server, client = socket.socketpair()
    made.append((server, client))
    return server, client


def closed_by_server(client: socket.socket) -> bool:
    client.settimeout(5)
    return client.recv(1) == b""


def test_a_peer_over_its_limit_makes_room_by_closing_its_longest_waiting(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    clients = Clients(total=8, per_peer=3)
    first = [pair(pairs) for _ in range(3)]
    entries = [clients.admit(server, "10.0.0.1") for server, _ in first]
    assert all(entries) and clients.count("10.0.0.1") == 3
    assert entries[0] is not None and entries[1] is not None
    clients.waiting(entries[1])  # a keep-alive connection waits for its next request: newer
    other = clients.admit(pair(pairs)[0], "10.0.0.2")
    assert other is not None and clients.count() == 4  # another address has room
    fourth = clients.admit(pair(pairs)[0], "10.0.0.1")
    assert fourth is not None
    assert entries[0].evicted and closed_by_server(first[0][1])  # the one waiting longest
    assert clients.count("10.0.0.1") == 3 and clients.count() == 4
    assert not clients.handling(entries[0])  # its thread learns it was closed
    fifth = clients.admit(pair(pairs)[0], "10.0.0.1")
    assert fifth is not None and not entries[1].evicted and entries[2] is not None
    assert entries[2].evicted


def test_connections_being_handled_are_never_closed_to_make_room(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    clients = Clients(total=3, per_peer=2, reserved=0)
    held = [clients.admit(pair(pairs)[0], "10.0.0.1") for _ in range(2)]
    for entry in held:
        assert entry is not None and clients.handling(entry)
    assert clients.admit(pair(pairs)[0], "10.0.0.1") is None  # refused: 503
    third = clients.admit(pair(pairs)[0], "10.0.0.2")
    assert third is not None and clients.count() == 3
    assert clients.admit(pair(pairs)[0], "10.0.0.3") is not None  # total full: third goes
    assert third.evicted and not any(e.evicted for e in held if e is not None)
    assert clients.handling(third) is False
    assert held[0] is not None
    clients.waiting(held[0])  # its answer was sent: it waits, and may go
    assert clients.admit(pair(pairs)[0], "10.0.0.1") is not None and held[0].evicted


def test_leave_frees_the_place(pairs: list[tuple[socket.socket, socket.socket]]) -> None:
    clients = Clients(total=1, per_peer=1, reserved=0)
    server, _ = pair(pairs)
    entry = clients.admit(server, "10.0.0.1")
    assert entry is not None and clients.handling(entry)
    assert clients.admit(pair(pairs)[0], "10.0.0.1") is None
    clients.leave(server)
    clients.leave(server)  # twice (closed to make room, then its thread ends): harmless
    assert clients.get(server) is None and clients.count() == 0
    assert clients.admit(pair(pairs)[0], "10.0.0.1") is not None


def test_the_deadline_counts_from_the_first_byte_of_a_request(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    server, client = pair(pairs)
    reader = DeadlineReader(server, idle_s=10, deadline_s=2)
    rfile = io.BufferedReader(reader)
    stop = threading.Event()

    def trickle() -> None:
        client.sendall(b"GET /healthz HTTP/1.1\r\n")
        while not stop.wait(0.5):
            client.sendall(b"X")  # a header that never ends

    sender = threading.Thread(target=trickle)
    started = time.monotonic()
    sender.start()
    try:
        assert rfile.readline() == b"GET /healthz HTTP/1.1\r\n"
        with pytest.raises(TimeoutError):
            rfile.readline()
    finally:
        stop.set()
        sender.join()
    elapsed = time.monotonic() - started
    assert 1.5 < elapsed < 6, elapsed
    assert reader.expired and reader.received >= len(b"GET /healthz HTTP/1.1\r\n") + 2
    assert server.gettimeout() == 10  # writes of the answer wait the idle timeout


def test_each_request_has_its_own_deadline_and_idling_is_not_late(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    server, client = pair(pairs)
    reader = DeadlineReader(server, idle_s=10, deadline_s=2)
    rfile = io.BufferedReader(reader)
    for _ in range(3):  # 3 requests over about 4.5 s on one connection, deadline 2 s
        reader.next_request()
        timer = threading.Timer(1.5, client.sendall, (b"GET / HTTP/1.1\r\n",))
        timer.start()
        assert rfile.readline() == b"GET / HTTP/1.1\r\n"
        timer.join()
        assert not reader.expired
    reader.next_request()
    client.close()
    assert rfile.readline() == b""  # the client left: no request, nothing expired
    assert not reader.expired and reader.received == 0


def test_idle_before_the_first_byte_is_not_a_late_request(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    server, _ = pair(pairs)
    reader = DeadlineReader(server, idle_s=1, deadline_s=10)
    with pytest.raises(TimeoutError):
        io.BufferedReader(reader).readline()
    assert not reader.expired and reader.received == 0  # closed silently, no 408


def test_reserved_places_when_every_connection_in_the_way_is_handled(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    clients = Clients(total=2, per_peer=2, reserved=2)
    held = [clients.admit(pair(pairs)[0], "10.0.0.1") for _ in range(2)]
    for entry in held:
        assert entry is not None and clients.handling(entry) and not entry.reserved
    first = clients.admit(pair(pairs)[0], "10.0.0.2")  # total full, all handled: reserved
    second = clients.admit(pair(pairs)[0], "10.0.0.1")  # its address full: reserved
    assert first is not None and first.reserved and second is not None and second.reserved
    assert clients.count() == 2 and clients.count(reserved=True) == 2
    assert clients.handling(first)
    third = clients.admit(pair(pairs)[0], "10.0.0.3")  # the waiting reserved one goes
    assert third is not None and third.reserved and second.evicted and second.gone.is_set()
    assert not first.evicted
    assert clients.handling(third)
    assert clients.admit(pair(pairs)[0], "10.0.0.4") is None  # all handled: refused
    assert held[0] is not None
    clients.waiting(held[0])  # a general place that waits is taken first, as before
    fourth = clients.admit(pair(pairs)[0], "10.0.0.4")
    assert fourth is not None and not fourth.reserved and held[0].evicted


def test_an_answer_not_read_in_time_expires(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    server, client = pair(pairs)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    writer = DeadlineWriter(server, deadline_s=1.5)
    writer.next_response()
    assert writer.write(b"x" * 1000) == 1000 and not writer.expired  # the buffer takes it
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        writer.write(b"x" * 10_000_000)  # the client reads nothing
    assert writer.expired and 1.3 < time.monotonic() - started < 4
    server, client = pair(pairs)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    received = []

    def read() -> None:
        while sum(map(len, received)) < 2_000_000:
            received.append(client.recv(1 << 20))

    reader = threading.Thread(target=read)
    reader.start()
    writer = DeadlineWriter(server, deadline_s=5)
    writer.next_response()
    writer.write(b"y" * 2_000_000)  # read as it is written: in time
    assert not writer.expired
    reader.join(10)
    assert b"".join(received) == b"y" * 2_000_000


def test_wrong_tokens_wait_longer_and_memory_stays_bounded() -> None:
    failures = AuthFailures(peers=3)
    delays = [failures.failed("10.0.0.1") for _ in range(FREE_AUTH_FAILURES + 8)]
    assert delays[:FREE_AUTH_FAILURES] == [0.0] * FREE_AUTH_FAILURES
    grown = delays[FREE_AUTH_FAILURES:]
    assert grown == sorted(grown) and grown[0] > 0 and grown[-1] == AUTH_DELAY_S[1]
    assert failures.failed("10.0.0.2") == 0.0  # counted per address
    for peer in range(100):
        failures.failed(f"10.1.0.{peer}")
    assert len(failures) == 3  # the least recent forgotten
    assert failures.failed("10.0.0.1") == 0.0  # forgotten with them
