"""What one connection may cost a real `buzz-admin serve` process, whatever the client sends
(relaycore.connection_limits, issue 37), with its RSS read from /proc: a header flood gets 431
and the connection closed; a request line, a header count, a slow head have their limits; a
ping flood from a client that reads nothing is read no faster than the client reads and the
client is dropped; invalid UTF-8 gets 1007 and no traceback; a Host that is no host gets 400 on
every path. CI scale (a few MiB); the issue's full sizes are bench/connection_bounds.py's.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import orjson
import pytest

from bench.connection_bounds import flood
from relaycore.connection_limits import HEAD_MAX_BYTES, HEAD_MAX_HEADERS, REQUEST_LINE_MAX_BYTES
from tests.relay_server import HOST, RelayProcess, start_relay

pytestmark = pytest.mark.django_db(transaction=True)

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def relay(django_db_setup: None, django_db_blocker: object) -> Iterator[RelayProcess]:
    relay = start_relay({"DJANGO_SETTINGS_MODULE": "tests.buzzrelay.bounded_settings"})
    try:
        yield relay
    finally:
        relay.stop()


def _connect(relay: RelayProcess) -> socket.socket:
    sock = socket.create_connection((HOST, relay.port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    return sock


def _answer(sock: socket.socket) -> bytes:
    """What the relay wrote before closing (or until 10 s pass)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return data


def _status_and_body(answer: bytes) -> tuple[int, dict[str, str]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), orjson.loads(body)


def _flood(sock: socket.socket, chunk: bytes, total: int) -> int:
    """Send up to `total` bytes of `chunk`s; the bytes the relay took before it stopped reading
    (a send blocked for 1 s) or closed the connection."""
    sent = flood(sock, chunk, total, stall=1)
    sock.settimeout(10)
    return sent


def test_a_header_flood_gets_431_and_costs_nothing(relay: RelayProcess) -> None:
    before = relay.rss()
    sock = _connect(relay)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    sent = _flood(sock, b"X-Flood: 1\r\n" * 4096, 8 * MIB)
    status, body = _status_and_body(_answer(sock))
    assert status == 431 and body["error"] == "headers_too_large", body
    # Closed after about HEAD_MAX_BYTES: the rest of the flood never reached the parser.
    assert sent < 8 * MIB
    assert relay.rss() - before < 8 * MIB


@pytest.mark.parametrize(("request_head", "status", "code"), [
    (b"GET /" + b"a" * REQUEST_LINE_MAX_BYTES + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414,
     "uri_too_long"),
    (b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % n for n in range(HEAD_MAX_HEADERS))
     + b"Host: 127.0.0.1\r\n\r\n", 431, "headers_too_large"),
    (b"GET /healthz HTTP/1.1\r\nX-Long: " + b"a" * HEAD_MAX_BYTES + b"\r\n\r\n", 431,
     "headers_too_large"),
    (b"GET /healthz HTTP/1.1\r\nHost 127.0.0.1\r\n\r\n", 400, "bad_request"),
])
def test_request_heads_past_a_limit_are_refused_as_json(
    relay: RelayProcess, request_head: bytes, status: int, code: str
) -> None:
    sock = _connect(relay)
    sock.sendall(request_head)
    answer = _answer(sock)
    answered, body = _status_and_body(answer)
    assert (answered, body["error"]) == (status, code), body
    assert b"access-control-allow-origin: *" in answer.lower()


def test_heads_within_the_limits_are_served(relay: RelayProcess) -> None:
    sock = _connect(relay)
    headers = b"".join(b"X-%d: 1\r\n" % n for n in range(HEAD_MAX_HEADERS - 2))
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers
                 + b"Connection: close\r\n\r\n")
    assert _answer(sock).startswith(b"HTTP/1.1 200")


def test_idle_and_slow_heads_are_timed_out(relay: RelayProcess) -> None:
    idle = _connect(relay)
    slow = _connect(relay)
    slow.sendall(b"GET /healthz HTTP/1.1\r\n")
    started = time.monotonic()
    for _ in range(4):  # a header line every 0.4 s: past the 1 s head timeout
        time.sleep(0.4)
        try:
            slow.sendall(b"X-Slow: 1\r\n")
        except OSError:
            break
    assert _status_and_body(_answer(slow))[0] == 408
    assert _answer(idle) == b""  # closed, nothing said: it asked nothing
    assert time.monotonic() - started < 9


def _handshake(relay: RelayProcess, host: bytes = b"team.example") -> socket.socket:
    sock = _connect(relay)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: " + host + b"\r\nUpgrade: websocket\r\n"
                 b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                 b"Sec-WebSocket-Version: 13\r\n\r\n")
    return sock


def _frame(opcode: int, payload: bytes) -> bytes:
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    assert len(payload) < 126
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked


def test_a_ping_flood_from_a_client_that_does_not_read_is_bounded_and_dropped(
    relay: RelayProcess,
) -> None:
    from tests.factories import make_community

    make_community()
    before = relay.rss()
    sock = _handshake(relay)
    head = sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 101"), head
    pings = _frame(0x9, b"p" * 125) * 4096  # ~540 KB of pings per send
    sent = _flood(sock, pings, 64 * MIB)
    # The relay stopped reading once its pongs filled the buffers it writes to: what it took
    # is about the sockets' buffers, not the 64 MiB offered, and its memory did not grow.
    assert sent < 32 * MIB, sent
    assert relay.rss() - before < 8 * MIB
    # Reading nothing, the client is dropped after the stall limit (2 s here).
    time.sleep(3)
    with pytest.raises((ConnectionResetError, BrokenPipeError)):
        for _ in range(1000):
            sock.sendall(pings)


def test_invalid_utf8_is_closed_1007_with_one_log_line_at_most(relay: RelayProcess) -> None:
    from tests.factories import make_community

    make_community()
    for _ in range(20):
        sock = _handshake(relay)
        assert sock.recv(4096).startswith(b"HTTP/1.1 101")
        sock.sendall(_frame(0x1, b"\xff\xfe not utf-8"))
        answer = _answer(sock)
        close = answer[answer.rindex(b"\x88"):]  # the close frame: 0x88, length, code
        assert int.from_bytes(close[2:4]) == 1007, answer[-40:]
    time.sleep(0.3)
    log = relay.log()
    assert "Traceback" not in log and "UnicodeDecodeError" not in log, log
    assert log.count("Invalid UTF-8") <= 1, log


@pytest.mark.parametrize("host", [
    b"127.0.0.1:%d@evil.example", b"127.0.0.1:abc", b"127.0.0.1:99999",
    b"team.example:%d\r\nHost: 127.0.0.1",  # two Host lines
])
@pytest.mark.parametrize("path", [b"/healthz", b"/", b"/query", b"/event", b"/admin/"])
def test_a_host_that_is_no_host_gets_400_json_on_every_path(
    relay: RelayProcess, host: bytes, path: bytes
) -> None:
    if b"%d" in host:
        host = host % relay.port
    sock = _connect(relay)
    sock.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: " + host
                 + b"\r\nAccept: application/nostr+json\r\nConnection: close\r\n\r\n")
    status, body = _status_and_body(_answer(sock))
    assert status == 400 and body["error"] == "bad_request", (status, body)


def test_a_websocket_handshake_with_a_bad_host_gets_400(relay: RelayProcess) -> None:
    sock = _handshake(relay, b"team.example:%d@evil.example" % relay.port)
    status, body = _status_and_body(_answer(sock))
    assert status == 400 and body["error"] == "bad_request"
