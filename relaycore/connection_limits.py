"""What one connection may cost the relay's server, whatever the client sends (issue 37).

uvicorn bounds neither a request's head nor a WebSocket client's pings: the abuse run behind
issue 37 held +247 MiB for 25 MiB of header lines (httptools keeps every header of an unfinished
head) and +143 MiB for 151 MiB of pings nobody read (websockets-sansio writes each pong past the
transport's buffer limit). Measured against uvicorn's own options (bench/connection_bounds.py,
docs/reliability.md section 11): `--http h11` with `h11_max_incomplete_event_size` bounds the
head (a plain-text 400, and a log line per refusal), but puts the pure-Python parser on every
request; `--ws websockets` (the library's legacy implementation, deprecated since websockets 14)
answers pings only as its writes drain, but keeps a client that reads nothing open for good;
wsproto is not installed. So the relay keeps httptools and websockets-sansio, and these
subclasses add the bounds (hand-written: no uvicorn option or other package does all of it):

- `BoundedHttpToolsProtocol`: a request line of at most REQUEST_LINE_MAX_BYTES (414), at most
  HEAD_MAX_HEADERS headers and HEAD_MAX_BYTES of head (431), answered as the relay's JSON errors
  and closed; a head (or a fresh connection's first byte to its head's end) must arrive within
  HEAD_TIMEOUT_SECONDS, else the connection is closed (slowloris, idle sockets; after a response
  uvicorn's own keep-alive timeout applies).
- `BoundedWebSocketProtocol`: reads nothing more from a client while its unread frames fill the
  transport's buffer (so pongs, like every other frame, go out only as fast as it reads), and
  drops a client that has read nothing for STALL_SECONDS while frames wait for it.

`HostCheck` is the ASGI guard that answers 400 to a Host `relaycore.addressing` refuses, on
every path, before any application. buzzrelay/server.py names the protocols in the options of
every server the relay runs (serve, the quickstart, the test suite's relays).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from typing import Any, cast

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

from relaycore.addressing import RequestAddress, host_error, host_header_error
from relaycore.asgi_types import ASGIApp, Receive, Scope, Send
from relaycore.http import CORS_HEADERS

__all__ = [
    "HEAD_MAX_BYTES",
    "HEAD_MAX_HEADERS",
    "HEAD_TIMEOUT_SECONDS",
    "REQUEST_LINE_MAX_BYTES",
    "STALL_SECONDS",
    "BoundedHttpToolsProtocol",
    "BoundedWebSocketProtocol",
    "HostCheck",
]

logger = logging.getLogger(__name__)

# nginx's large_client_header_buffers (4 x 8k) and Apache's LimitRequestFields (100): a NIP-98
# Authorization header is at most 2 KiB, a staff page's cookies a few hundred bytes.
REQUEST_LINE_MAX_BYTES = 8 * 1024
HEAD_MAX_HEADERS = 100
HEAD_MAX_BYTES = 32 * 1024
HEAD_TIMEOUT_SECONDS = 10.0
# A WebSocket client that reads nothing for this long while the relay has frames for it (its
# kernel buffers and the transport's are full) is dropped: a reading client, however slow,
# empties the buffer below its low mark now and then, which restarts the clock. nginx's
# send_timeout is 60 s; a client the relay has stopped reading from costs only its buffers.
STALL_SECONDS = 30.0
# At most this much of a turn's frames is held back (`CoalescingTransport`) before it goes to
# the transport: held bytes are not in the transport's buffer, so its flow control (which pauses
# the application's sends, and so makes a slow client's outbox drop with a NOTICE) would not see
# them, and one long turn (a backlog of live events fanned out without a pause) would hold every
# frame of it. asyncio's own high-water mark is 64 KiB.
HELD_MAX_BYTES = 64 * 1024


def _seconds(name: str, default: float) -> float:
    """A Django setting that a test's settings module may shorten (read when it is used: the
    protocols are imported before Django is configured)."""
    from django.conf import settings

    return float(getattr(settings, name, default))

_CORS = b"".join(f"{name}: {value}\r\n".encode() for name, value in CORS_HEADERS.items())
_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 414: b"URI Too Long",
            431: b"Request Header Fields Too Large"}


def _refusal_bytes(status: int, code: str, message: str) -> bytes:
    """A complete HTTP/1.1 answer in the relay's JSON error shape (PROTOCOL.md section 3)."""
    body = orjson.dumps({"error": code, "message": message})
    return (
        b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: close\r\n%s\r\n%s"
        % (status, _REASONS[status], len(body), _CORS, body)
    )


class _Timer:
    """At most one pending call of `callback` (the head's deadline, the stall limit)."""

    __slots__ = ("_callback", "_handle")

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback
        self._handle: asyncio.TimerHandle | None = None

    def start(self, seconds: float) -> None:
        if self._handle is None:
            self._handle = asyncio.get_running_loop().call_later(seconds, self._fire)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        self._callback()


class _HeadRefused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.answer = _refusal_bytes(status, code, message)


class BoundedHttpToolsProtocol(HttpToolsProtocol):  # type: ignore[misc]
    """uvicorn's httptools protocol with a bounded, timed request head."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_bytes = 0  # bytes received since the last request ended
        self._in_head = True
        self._url_bytes = 0
        self._header_count = 0
        self._refused: _HeadRefused | None = None
        self._head_timeout = _seconds("RELAY_HEAD_TIMEOUT_SECONDS", HEAD_TIMEOUT_SECONDS)
        self._head_timer = _Timer(self._head_timed_out)
        self._head_timer.start(self._head_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_timer.cancel()
        super().connection_lost(exc)

    def _head_timed_out(self) -> None:
        if self._in_head and not self.transport.is_closing():
            if self._head_bytes:
                self.transport.write(_refusal_bytes(
                    408, "request_timeout",
                    f"the request head did not arrive within {self._head_timeout:g} s"))
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._in_head and self._head_bytes + len(data) > HEAD_MAX_BYTES:
            # Parse no further than the bound: httptools would buffer an unfinished header
            # line of any length. The head may end within the bytes allowed; then the rest
            # (a body) is parsed as usual.
            allowed = HEAD_MAX_BYTES - self._head_bytes
            self._feed(data[:allowed])
            if self._in_head:
                self._refuse(_HeadRefused(
                    431, "headers_too_large",
                    f"the request head is over {HEAD_MAX_BYTES} bytes"))
                return
            data = data[allowed:]
        if self._in_head:
            self._head_bytes += len(data)
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        if self.transport.is_closing() or not data:
            return
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError:
            self._refuse(self._refused or _HeadRefused(
                400, "bad_request", "the request is not valid HTTP/1.1"))

    def _refuse(self, refused: _HeadRefused) -> None:
        """Answer and close, with no log line: the client's mistake, at any rate it likes."""
        self._head_timer.cancel()
        self._in_head = False
        if not self.transport.is_closing():
            self.transport.write(refused.answer)
            self.transport.close()

    # httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._url_bytes = 0
        self._header_count = 0
        self._head_timer.start(self._head_timeout)

    def on_url(self, url: bytes) -> None:
        self._url_bytes += len(url)
        if self._url_bytes > REQUEST_LINE_MAX_BYTES:
            self._refused = _HeadRefused(
                414, "uri_too_long", f"the request target is over {REQUEST_LINE_MAX_BYTES} bytes")
            raise self._refused
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > HEAD_MAX_HEADERS:
            self._refused = _HeadRefused(
                431, "headers_too_large", f"the request has over {HEAD_MAX_HEADERS} headers")
            raise self._refused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_timer.cancel()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._head_bytes = 0


class CoalescingTransport:
    """A transport whose application frames within one turn of the loop after the first go out
    together.

    uvicorn's websockets-sansio protocol writes each frame to the transport as it is sent, and
    a socket transport with nothing buffered sends at once: a system call per frame, 500 for a
    500-event replay (and as many reads for the client). Here, while `coalescing` (set by the
    protocol around an application's send), the first write of a turn goes out at once as
    before (a lone OK waits for nothing), and the writes that follow it in the same turn are
    joined and written once, at the loop's next turn, in order: the same bytes, the same frames,
    fewer calls. Once more than HELD_MAX_BYTES are held they go at once, so that a long turn
    stays under the transport's flow control. Any other write (a pong, a close) first writes
    what is held, then goes out as it did. Closing writes what is held first; aborting drops
    it, as the socket transport drops its own buffer. Everything else is the transport's.
    Hand-written: neither uvicorn nor asyncio coalesce writes (asyncio has no cork)."""

    def __init__(self, transport: asyncio.WriteTransport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._turn: asyncio.Handle | None = None  # set from a turn's first frame to its end
        self.coalescing = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def write(self, data: bytes) -> None:
        if not self.coalescing:
            self.flush()
            self._transport.write(data)
        elif self._turn is None:
            self._turn = self._loop.call_soon(self._end_turn)
            self._transport.write(data)
        elif data:
            self._held.append(data)
            self._held_bytes += len(data)
            if self._held_bytes > HELD_MAX_BYTES:
                self.flush()

    def _end_turn(self) -> None:
        self._turn = None
        self.flush()

    def flush(self) -> None:
        """Write what this turn held (nothing once the transport is closing)."""
        if self._held:
            data = b"".join(self._held)
            self._held.clear()
            self._held_bytes = 0
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held.clear()
        self._held_bytes = 0
        self._transport.abort()


_FRAME_HEAD_16 = struct.Struct("!BBH")
_FRAME_HEAD_64 = struct.Struct("!BBQ")
_FIN_TEXT = 0x81  # FIN, opcode 1 (text)


def text_frame(payload: bytes) -> bytes:
    """A server's unmasked, unfragmented text frame (RFC 6455 section 5.2) of `payload`.

    The same bytes as websockets' `Frame(TEXT, payload).serialize(mask=False)` (a test compares
    them), for a fraction of the calls: the library builds a `Frame`, checks it, and writes it
    through an `io.BytesIO`, 6-10 us a frame that a 500-event replay paid 500 times (and every
    live event once per subscriber). Hand-written for that measurement (bench/peer.py's replay,
    docs/performance.md): only the length's encoding is ours."""
    length = len(payload)
    if length < 126:
        return bytes((_FIN_TEXT, length)) + payload
    if length < 65536:
        return _FRAME_HEAD_16.pack(_FIN_TEXT, 126, length) + payload
    return _FRAME_HEAD_64.pack(_FIN_TEXT, 127, length) + payload


class BoundedWebSocketProtocol(WebSocketsSansIOProtocol):  # type: ignore[misc]
    """uvicorn's websockets-sansio protocol that reads only as fast as the client does, its
    writes coalesced (`CoalescingTransport`)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports write like asyncio's but are not its classes: no isinstance.
        self._coalescing = CoalescingTransport(cast(asyncio.WriteTransport, transport),
                                               asyncio.get_running_loop())
        super().connection_made(cast(asyncio.BaseTransport, self._coalescing))
        self._write_paused = False
        self._stall_timer = _Timer(self._stalled)

    async def send(self, message: Any) -> None:
        if message["type"] != "websocket.send":
            await super().send(message)
            return
        # Coalesced: the application's frames (`CoalescingTransport`). Once writable, uvicorn's
        # send runs to its write without suspending, so nothing else writes meanwhile.
        await self.writable.wait()
        self._coalescing.coalescing = True
        try:
            text = message.get("text")
            if text is not None and message.get("bytes") is None and self._plain_text_frames():
                self.transport.write(text_frame(text.encode()))
            else:
                await super().send(message)
        finally:
            self._coalescing.coalescing = False

    def _plain_text_frames(self) -> bool:
        """Whether a text message may be framed here (`text_frame`) rather than by websockets'
        `Protocol.send_text`: the connection is open both ways with nothing of the library's
        waiting to be written, and no extension transforms frames (permessage-deflate is off,
        buzzrelay/server.py). Otherwise uvicorn's own send runs, with its errors."""
        conn = self.conn
        return (
            self.handshake_complete
            and not self.disconnected
            and not self.close_sent
            and conn.state is State.OPEN
            and not conn.expect_continuation_frame
            and not conn.extensions
            and not conn.writes
        )

    def pause_writing(self) -> None:
        super().pause_writing()
        self._write_paused = True
        # Every frame read may be a ping whose pong lands in the unread buffer.
        self.transport.pause_reading()
        self._stall_timer.start(_seconds("RELAY_WS_STALL_SECONDS", STALL_SECONDS))

    def resume_writing(self) -> None:
        super().resume_writing()
        self._write_paused = False
        self._stall_timer.cancel()
        if not self.read_paused and not self.transport.is_closing():
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # The application's receive() resumes reading after each message, paused writes or not.
        if self._write_paused and not self.transport.is_closing():
            self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stall_timer.cancel()
        super().connection_lost(exc)

    def _stalled(self) -> None:
        if self._write_paused and not self.transport.is_closing():
            # A close frame would wait behind the unread ones: drop the connection (and the
            # buffer) at once. The application hears a disconnect (1006).
            self.transport.abort()



_JSON_400 = [(b"content-type", b"application/json"),
             *((name.lower().encode(), value.encode()) for name, value in CORS_HEADERS.items())]


def _host_problem(scope: Scope) -> str | None:
    """`host_error` of the request; without trusted proxies only its Host lines are read (every
    request passes here: no map of all its headers for one of them)."""
    from django.conf import settings

    if settings.RELAY_TRUSTED_PROXIES:
        return host_error(RequestAddress.of_scope(scope))
    hosts = [value for name, value in scope.get("headers", ()) if name == b"host"]
    return host_header_error(len(hosts), hosts[0].decode("latin-1") if hosts else "")


class HostCheck:
    """ASGI middleware: 400 (JSON) for a request or WebSocket handshake whose Host
    `relaycore.addressing.host_error` refuses, on every path."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and (problem := _host_problem(scope)):
            body = orjson.dumps({"error": "bad_request", "message": problem})
            headers = [*_JSON_400, (b"content-length", b"%d" % len(body))]
            if scope["type"] == "http":
                await send({"type": "http.response.start", "status": 400, "headers": headers})
                await send({"type": "http.response.body", "body": body})
            else:  # the handshake answered as HTTP (ASGI's websocket.http.response extension)
                await send({"type": "websocket.http.response.start", "status": 400,
                            "headers": headers})
                await send({"type": "websocket.http.response.body", "body": body})
            return
        await self.app(scope, receive, send)
