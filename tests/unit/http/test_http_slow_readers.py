"""The worker's HTTP server (in this process, on real sockets; Redis is never reached)
against clients that take every place: connections from four addresses that pipeline
requests and never read the answers, whose writes then block. /healthz and /readyz still
answer at once (places kept for them), each blocked answer closes its connection at its
deadline, and a client that guesses the token waits longer after each wrong one."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dblog_worker.config import Config, parse
from dblog_worker.http import connections
from dblog_worker.http.connections import MAX_CONNECTIONS_PER_PEER, MAX_PIPELINED
from dblog_worker.http.server import ControlServer
from dblog_worker.telemetry import Telemetry
from tests.services import free_port

ATTACKERS = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
TOKEN = "Tq3v-9f3c02d1e7a4b6c8"


def config(tmp_path: Path, token: str | None = None) -> Config:
    data = {
        "source": {"name": "shop", "dsn": "host=127.0.0.1 dbname=shop user=dblog",
                   "tables": ["public.items"]},
        "redis": {"url": f"redis://127.0.0.1:{free_port()}/0"},
        "landing": {"path": str(tmp_path / "landing")},
        "http": {"listen": "127.0.0.1:0"},
    }
    return parse(data, {} if token is None else {"DBLOG_HTTP_TOKEN": token})


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ControlServer]:
    monkeypatch.setattr(connections, "RESPONSE_DEADLINE_S", 3.0)
    started = ControlServer(config(tmp_path), Telemetry("shop", kind="postgresql")).start()
    yield started
    started.stop()


def address(server: ControlServer) -> tuple[str, int]:
    host, port = server.server.server_address[:2]
    return str(host), int(port)


def probe(server: ControlServer, path: str, source: str = "127.0.0.1",
          token: str | None = None) -> tuple[int, bytes, float]:
    started = time.monotonic()
    conn = http.client.HTTPConnection(*address(server), timeout=10,
                                      source_address=(source, 0))
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        response = conn.getresponse()
        return response.status, response.read(), time.monotonic() - started
    finally:
        conn.close()


def never_reads(server: ControlServer, source: str) -> socket.socket:
    """A connection that sends a flood of pipelined requests for the largest public file
    and never reads an answer: its server thread blocks writing them."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting
    sock.bind((source, 0))
    sock.settimeout(10)
    sock.connect(address(server))
    request = b"GET /live/live.js HTTP/1.1\r\nHost: localhost\r\n\r\n"
    sock.setblocking(False)
    with contextlib.suppress(BlockingIOError):
        sock.send(request * 400)
    return sock


def eventually(condition: Callable[[], bool], within: float) -> bool:
    """``condition`` holds within ``within`` seconds (the machine may be busy)."""
    end = time.monotonic() + within
    while not condition() and time.monotonic() < end:
        time.sleep(0.05)
    return condition()


def all_closed(server: ControlServer, within: float) -> bool:
    """The server closed every connection within ``within`` seconds (reading them from
    this side would make them readers)."""
    return eventually(lambda: server.server.clients.count() == 0, within)


def test_readers_that_never_read_do_not_lock_out_the_probes(server: ControlServer) -> None:
    blocked = [never_reads(server, source) for source in ATTACKERS
               for _ in range(MAX_CONNECTIONS_PER_PEER)]
    try:
        time.sleep(1.0)  # were every answer written, the socket buffers would fill
        for source in ("127.0.0.1", ATTACKERS[0]):  # another address, and an attacker's
            status, body, took = probe(server, "/healthz", source)
            assert (status, json.loads(body)) == (200, {"status": "ok"}), body
            assert took < 2, took
            status, body, took = probe(server, "/readyz", source)  # no session: not ready
            assert (status, json.loads(body)["ready"]) == (503, False), body
            assert took < 2, took
        # each was answered up to the limit of pipelined requests (or until its answers
        # filled the buffers: then at its answer's deadline, 3 s here), then closed
        assert all_closed(server, 10)
    finally:
        for sock in blocked:
            sock.close()


def test_answers_that_block_hold_every_place_until_their_deadline(
        server: ControlServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the limit of pipelined requests, the answers fill the socket buffers and
    every server thread blocks writing: all places are being handled, none can be closed
    to make room. The places kept for the probes answer /healthz and /readyz (and nothing
    else), and each blocked answer closes its connection at its deadline."""
    monkeypatch.setattr(connections, "MAX_PIPELINED", 1_000_000)
    monkeypatch.setattr(connections, "RESPONSE_DEADLINE_S", 8.0)
    blocked = [never_reads(server, source) for source in ATTACKERS
               for _ in range(MAX_CONNECTIONS_PER_PEER)]
    started = time.monotonic()
    clients = server.server.clients
    try:
        assert eventually(lambda: clients.count() == len(blocked) and all(
            c.handling for c in clients._open.values()), 5), clients.count()
        for source in ("127.0.0.1", ATTACKERS[0]):
            status, body, took = probe(server, "/healthz", source)
            assert (status, took < 2) == (200, True), (body, took)
            status, body, took = probe(server, "/readyz", source)
            assert (status, took < 2) == (503, True), (body, took)
            assert json.loads(body)["ready"] is False
        status, body, took = probe(server, "/live/live.js")
        assert status == 503 and b"too many requests at once" in body and took < 2
        assert time.monotonic() - started < 8, "the probes came after the deadline"
        # each probe's place is given back; each blocked answer ends at its deadline
        assert eventually(lambda: clients.count(reserved=True) == 0, 2)
        assert all_closed(server, 15)
        assert probe(server, "/live/live.js")[0] == 200
    finally:
        for sock in blocked:
            sock.close()


def test_pipelined_requests_are_answered_up_to_a_limit_then_closed(
        server: ControlServer) -> None:
    sock = socket.create_connection(address(server), timeout=10)
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n" * (MAX_PIPELINED + 5))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    finally:
        sock.close()
    answers = data.count(b"HTTP/1.1 200 OK")
    assert answers == MAX_PIPELINED + 1, answers  # the last one says Connection: close
    assert data.count(b"Connection: close") == 1


def test_a_reader_that_reads_keeps_its_connection(server: ControlServer) -> None:
    conn = http.client.HTTPConnection(*address(server), timeout=10)
    try:
        for _ in range(MAX_PIPELINED * 3):  # one at a time: no pipelining, no limit
            conn.request("GET", "/healthz")
            assert conn.getresponse().read() == b'{"status": "ok"}'
        first = conn.sock
        conn.request("GET", "/healthz")
        conn.getresponse().read()
        assert conn.sock is first
    finally:
        conn.close()


def test_wrong_tokens_are_answered_ever_slower(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connections, "AUTH_DELAY_S", (0.2, 1.0))
    guarded = ControlServer(config(tmp_path, TOKEN), Telemetry("shop", kind="postgresql"))
    guarded.start()
    try:
        for _ in range(connections.FREE_AUTH_FAILURES + 4):  # no token at all: no guess
            status, _, took = probe(guarded, "/metrics", ATTACKERS[3])
            assert status == 401 and took < 0.5, took
        times = []
        for _ in range(connections.FREE_AUTH_FAILURES + 4):
            status, _, took = probe(guarded, "/api/v1/openapi.json", ATTACKERS[1], "wrong")
            assert status == 401
            times.append(took)
        assert max(times[:connections.FREE_AUTH_FAILURES]) < 0.5, times
        for took, delay in zip(times[-4:], (0.2, 0.4, 0.8, 1.0), strict=True):
            assert took >= 0.9 * delay, times
        # the right token is not slowed, nor another address's wrong one
        status, _, took = probe(guarded, "/api/v1/openapi.json", ATTACKERS[1], TOKEN)
        assert status == 200 and took < 0.5, took
        status, _, took = probe(guarded, "/api/v1/openapi.json", ATTACKERS[2], "wrong")
        assert status == 401 and took < 0.5, took
        # guesses in parallel are slowed alike (the count is the address's)
        results: list[float] = []
        threads = [threading.Thread(target=lambda: results.append(
            probe(guarded, "/metrics", ATTACKERS[1], "wrong")[2])) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert min(results) >= 0.9, results
    finally:
        guarded.stop()


def test_a_guess_waiting_for_its_answer_can_be_closed_to_make_room(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection whose wrong token waits to be answered is not being handled: a new
    connection that needs its place closes it, and its thread ends at once (a flood of
    guesses cannot pile up sleeping threads)."""
    monkeypatch.setattr(connections, "AUTH_DELAY_S", (30.0, 30.0))
    monkeypatch.setattr(connections, "FREE_AUTH_FAILURES", 0)
    guarded = ControlServer(config(tmp_path, TOKEN), Telemetry("shop", kind="postgresql"))
    guarded.start()
    guessers = []
    try:
        threads = threading.active_count()
        for _ in range(MAX_CONNECTIONS_PER_PEER):
            sock = socket.create_connection(address(guarded), timeout=10,
                                            source_address=(ATTACKERS[0], 0))
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                         b"Authorization: Bearer wrong\r\n\r\n")
            guessers.append(sock)
        time.sleep(0.5)
        status, _, took = probe(guarded, "/api/v1/openapi.json", ATTACKERS[0], TOKEN)
        assert status == 200 and took < 1, took
        # one guesser made room, and its thread ended: the others wait on
        assert eventually(lambda: guarded.server.clients.count()
                          == MAX_CONNECTIONS_PER_PEER - 1, 2)
        time.sleep(0.5)
        assert threading.active_count() <= threads + MAX_CONNECTIONS_PER_PEER
    finally:
        for sock in guessers:
            sock.close()
        guarded.stop()
