"""A small synchronous Nostr WebSocket client for tests (the `websockets` library's sync client).

Synchronous on purpose: tests write through the (synchronous) services between frames. The
socket connects to 127.0.0.1 while the URL names the community's host, so the Host header (and
the NIP-42 relay URL) is the community's.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import orjson
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from nostr.nip42 import make_auth_event
from tests.factories import Key

DEFAULT_TIMEOUT = 10.0


class NostrWs:
    def __init__(
        self,
        port: int,
        host: str = "team.example",
        *,
        max_queue: int = 16,
        receive_buffer: int | None = None,
        compression: bool = True,
    ) -> None:
        """`max_queue`: frames buffered before the client stops reading from the socket (a
        client that does not call `recv` then leaves the relay's frames in the socket);
        `receive_buffer`: the socket's SO_RCVBUF (fixed, so the kernel cannot grow it);
        `compression`: offer permessage-deflate (on by default, as most clients do)."""
        self.url = f"ws://{host}:{port}/"
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.settimeout(DEFAULT_TIMEOUT)
        sock.connect(("127.0.0.1", port))
        connection = connect(
            self.url,
            sock=sock,
            max_size=2**24,
            max_queue=max_queue,
            compression="deflate" if compression else None,
        )
        self.ws: ClientConnection = connection.__enter__()
        first = self.recv()
        assert first[0] == "AUTH" and isinstance(first[1], str) and first[1], first
        self.challenge: str = first[1]

    # frames --------------------------------------------------------------------------------

    def send(self, message: Any) -> None:
        if not isinstance(message, str | bytes):
            message = orjson.dumps(message).decode()
        self.ws.send(message)

    def recv(self, timeout: float = DEFAULT_TIMEOUT) -> list[Any]:
        frame = self.ws.recv(timeout=timeout)
        parsed: list[Any] = orjson.loads(frame)
        return parsed

    def recv_until(self, predicate: Any, timeout: float = DEFAULT_TIMEOUT) -> list[list[Any]]:
        """Frames up to and including the first one `predicate` accepts."""
        deadline = time.monotonic() + timeout
        frames: list[list[Any]] = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no matching frame; got {frames}")
            frame = self.recv(remaining)
            frames.append(frame)
            if predicate(frame):
                return frames

    def expect_quiet(self, seconds: float) -> list[list[Any]]:
        """Every frame received within `seconds` (expected: none)."""
        frames: list[list[Any]] = []
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                frames.append(self.recv(remaining))
            except TimeoutError:
                break
        return frames

    def close(self) -> None:
        self.ws.__exit__(None, None, None)

    def closed_code(self, timeout: float = DEFAULT_TIMEOUT) -> int | None:
        """Read until the relay closes the connection; the close code it sent."""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                self.ws.recv(timeout=deadline - time.monotonic())
        except ConnectionClosed as exc:
            return exc.rcvd.code if exc.rcvd is not None else None
        raise TimeoutError("the relay did not close the connection")

    # NIP-42 / NIP-01 -----------------------------------------------------------------------

    def auth(
        self, key: Key, *, relay_url: str | None = None, challenge: str | None = None
    ) -> list[Any]:
        event = make_auth_event(
            key.secret, challenge=challenge or self.challenge, relay_url=relay_url or self.url
        )
        self.send(["AUTH", event])
        return self.recv_until(lambda f: f[0] == "OK" and f[1] == event["id"])[-1]

    def publish(self, event: dict[str, Any]) -> list[Any]:
        self.send(["EVENT", event])
        return self.recv_until(lambda f: f[0] == "OK" and f[1] == event["id"])[-1]

    def req(self, sub_id: str, *filters: dict[str, Any]) -> None:
        self.send(["REQ", sub_id, *filters])

    def replay(self, sub_id: str, *filters: dict[str, Any]) -> list[dict[str, Any]]:
        """REQ, then the events up to EOSE; fails on CLOSED."""
        self.req(sub_id, *filters)
        frames = self.recv_until(lambda f: f[0] in ("EOSE", "CLOSED") and f[1] == sub_id)
        assert frames[-1][0] == "EOSE", frames[-1]
        return [f[2] for f in frames[:-1] if f[0] == "EVENT" and f[1] == sub_id]

    def next_event(self, sub_id: str, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        frames = self.recv_until(lambda f: f[0] == "EVENT" and f[1] == sub_id, timeout)
        event: dict[str, Any] = frames[-1][2]
        return event
