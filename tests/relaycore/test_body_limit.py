"""The body limit and the relay's answers to hostile HTTP, over raw sockets against a real server.

PROTOCOL.md section 3: body size (413) is the first check, enforced while the body is read
(relaycore.body_limit), so a chunked or lying body is never read past 64 KiB; a slow body is a
408; and no path answers with Django's HTML error pages.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tests.factories import make_community, make_key, nip98_header
from tests.relay_server import HOST, RelayProcess, start_relay

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def relay(django_db_setup: None, django_db_blocker: Any) -> Iterator[RelayProcess]:
    with django_db_blocker.unblock():
        server = start_relay({"RELAY_BODY_TIMEOUT_SECONDS": "1"})
    yield server
    server.stop()


@pytest.fixture
def community() -> None:
    make_community(host=HOST)


def _connect(relay: RelayProcess) -> socket.socket:
    sock = socket.create_connection((HOST, relay.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _read_response(sock: socket.socket, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response: status, lowercase headers, body (by Content-Length)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response: {data!r}")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    if headers.get("transfer-encoding") == "chunked":
        while not body.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return status, headers, _dechunk(body)
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body[:length]


def _dechunk(data: bytes) -> bytes:
    out = b""
    while True:
        size_line, data = data.split(b"\r\n", 1)
        size = int(size_line, 16)
        if size == 0:
            return out
        out, data = out + data[:size], data[size + 2:]


def _head(path: str, extra: str = "", host: str = HOST) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"{extra}\r\n").encode()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _assert_json_error(status: int, headers: dict[str, str], body: bytes, code: str) -> None:
    assert headers["content-type"] == "application/json", (status, headers, body[:200])
    assert orjson.loads(body)["error"] == code
    assert headers["access-control-allow-origin"] == "*"


@pytest.mark.parametrize("path", ["/query", "/event", "/admin/login/", "/nowhere"])
def test_a_chunked_body_over_the_limit_is_413_json(
    relay: RelayProcess, community: None, path: str
) -> None:
    body = orjson.dumps([{"artifact": "current", "progress": None, "pad": "x" * 70_000}])
    with _connect(relay) as sock:
        sock.sendall(_head(path, "Transfer-Encoding: chunked\r\n") + _chunk(body) + _chunk(b""))
        status, headers, answer = _read_response(sock)
    assert status == 413
    _assert_json_error(status, headers, answer, "payload_too_large")


def test_a_huge_chunked_upload_is_refused_without_reading_it(
    relay: RelayProcess, community: None
) -> None:
    """30 MB sent unauthenticated: the answer comes after the first 64 KiB, and the relay stops
    reading (the kernel's socket buffers take a few MB at most), so the upload cannot finish."""
    piece = _chunk(b"x" * 65536)
    total = 30 * 1024 * 1024
    sent = 0
    unsent = memoryview(b"")  # the rest of a piece the socket took only part of
    stopped = False
    with _connect(relay) as sock:
        sock.sendall(_head("/event", "Transfer-Encoding: chunked\r\n"))
        sock.setblocking(False)
        deadline = time.monotonic() + 30
        while sent < total and time.monotonic() < deadline:
            readable, writable, _ = select.select([sock], [sock], [], 1)
            if readable:
                stopped = True
                break
            if writable:
                unsent = unsent or memoryview(piece)
                try:
                    taken = sock.send(unsent)
                except (BlockingIOError, InterruptedError):
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    # The relay answered and closed with the upload unread, so its kernel
                    # reset the connection: the reset can reach this send before select
                    # reports the answer, which is still queued to be read.
                    stopped = True
                    break
                sent += taken
                unsent = unsent[taken:]
        assert stopped, f"the relay took {sent} bytes without answering"
        sock.setblocking(True)
        status, headers, answer = _read_response(sock)
    assert status == 413
    _assert_json_error(status, headers, answer, "payload_too_large")
    assert sent < 16 * 1024 * 1024, sent


def test_a_content_length_over_the_limit_is_refused_before_any_body(
    relay: RelayProcess, community: None
) -> None:
    with _connect(relay) as sock:
        sock.sendall(_head("/query", f"Content-Length: {30 * 1024 * 1024}\r\n"))
        status, headers, answer = _read_response(sock)
    assert status == 413
    _assert_json_error(status, headers, answer, "payload_too_large")
    assert headers["connection"] == "close"


def test_a_malformed_content_length_is_400_json(relay: RelayProcess, community: None) -> None:
    with _connect(relay) as sock:
        sock.sendall(_head("/query", "Content-Length: 12abc\r\n") + b"[]")
        status, _headers, answer = _read_response(sock)
    # The HTTP server refuses the header itself (its plain 400), or the relay does (JSON 400).
    assert status == 400
    assert b"<" not in answer


def test_a_content_length_shorter_than_the_body_reads_only_what_it_names(
    relay: RelayProcess, community: None
) -> None:
    """The body is the first 2 bytes; the rest is no request at all: the HTTP server refuses the
    connection's garbage (its plain 400) or the relay judges the 2-byte body (401, no NIP-98
    header). Never a 5xx or an HTML page, and the relay stays up."""
    junk = b"x" * 70_000
    with _connect(relay) as sock:
        sock.sendall(_head("/query", "Content-Length: 2\r\n") + b"[]" + junk)
        status, _headers, answer = _read_response(sock)
    assert status in (400, 401), (status, answer)
    assert b"<" not in answer
    with _connect(relay) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert _read_response(sock)[0] == 200


def test_a_body_slower_than_the_timeout_is_408_json(relay: RelayProcess, community: None) -> None:
    with _connect(relay) as sock:
        sock.sendall(_head("/query", "Content-Length: 1000\r\n") + b"[{")
        started = time.monotonic()
        status, headers, answer = _read_response(sock, timeout=10)
        waited = time.monotonic() - started
    assert status == 408
    _assert_json_error(status, headers, answer, "request_timeout")
    assert 0.8 <= waited < 5, waited


def test_a_slow_chunked_body_within_the_limit_and_timeout_is_served(
    relay: RelayProcess, community: None
) -> None:
    reader = make_key()
    body = orjson.dumps([{"artifact": "current", "progress": None}])
    auth = nip98_header(reader, f"{relay.url}/query", "POST", body)
    with _connect(relay) as sock:
        extra = f"Authorization: {auth}\r\nTransfer-Encoding: chunked\r\n"
        sock.sendall(_head("/query", extra, host=f"{HOST}:{relay.port}"))
        for index in range(0, len(body), 7):
            sock.sendall(_chunk(body[index:index + 7]))
            time.sleep(0.02)
        sock.sendall(_chunk(b""))
        status, _headers, answer = _read_response(sock)
    assert status == 200, answer
    assert orjson.loads(answer)["reset"] is True


@pytest.mark.parametrize(
    ("request_bytes", "status", "code"),
    [
        (b"GET /static/no-such-file.css HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 404, "not_found"),
        (b"GET /no/such/path HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 404, "not_found"),
        (b"POST /admin/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
         b"application/x-www-form-urlencoded\r\nContent-Length: 7\r\n\r\nuser=me", 403,
         "csrf_failed"),
        (b"GET /admin/login/ HTTP/1.1\r\nHost: bad_host!\r\n\r\n", 400, "bad_request"),
    ],
)
def test_djangos_error_pages_are_json(
    relay: RelayProcess, community: None, request_bytes: bytes, status: int, code: str | None
) -> None:
    with _connect(relay) as sock:
        sock.sendall(request_bytes)
        got, headers, answer = _read_response(sock)
    assert got == status, answer[:300]
    assert headers["content-type"] == "application/json", answer[:300]
    assert b"<" not in answer
    if code is not None:
        assert orjson.loads(answer)["error"] == code
