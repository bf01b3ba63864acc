"""The WebSocket protocol's own text frames (`text_frame`, `BoundedWebSocketProtocol.send`):
the bytes websockets would write, and written without websockets' `Protocol.send_text` only while
the connection is plainly open."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from websockets.frames import Frame, Opcode

from relaycore.connection_limits import text_frame
from tests.relaycore.uvicorn_app import serving


def _library_frame(payload: bytes) -> bytes:
    return Frame(Opcode.TEXT, payload).serialize(mask=False, extensions=[])


@given(st.text())
def test_a_text_frame_is_the_librarys_frame(text: str) -> None:
    payload = text.encode()
    assert text_frame(payload) == _library_frame(payload)


def test_each_length_encoding_is_the_librarys() -> None:
    """7-bit, 16-bit and 64-bit lengths, at and around their edges."""
    for length in (0, 1, 125, 126, 127, 65535, 65536, 70000):
        payload = b"x" * length
        assert text_frame(payload) == _library_frame(payload), length


def test_an_open_connections_text_goes_out_without_the_librarys_send_text() -> None:
    """Through uvicorn: text messages (short, 16-bit and 64-bit lengths) reach a websockets
    client whole and in order, framed by the relay (the library's `send_text` never called),
    and a binary message still goes through the library."""
    from websockets.asyncio.client import connect

    from relaycore.connection_limits import BoundedWebSocketProtocol

    library_sends: list[str] = []
    texts = ["short", "m" * 300, "l" * 70_000, "é ✓"]

    class Watching(BoundedWebSocketProtocol):  # type: ignore[misc]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            conn = self.conn
            send_text, send_binary = conn.send_text, conn.send_binary

            def watched_text(*args: Any, **kwargs: Any) -> None:
                library_sends.append("text")
                send_text(*args, **kwargs)

            def watched_binary(*args: Any, **kwargs: Any) -> None:
                library_sends.append("binary")
                send_binary(*args, **kwargs)

            conn.send_text = watched_text  # type: ignore[method-assign]
            conn.send_binary = watched_binary  # type: ignore[method-assign]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return
        await receive()
        await send({"type": "websocket.accept"})
        for text in texts:
            await send({"type": "websocket.send", "text": text})
        await send({"type": "websocket.send", "bytes": b"\x00\x01"})
        await receive()

    async def scenario() -> None:
        async with (serving(app, Watching) as port,
                    connect(f"ws://127.0.0.1:{port}/", compression=None, max_size=2**20) as ws):
            got = [await ws.recv() for _ in range(len(texts) + 1)]
        assert got == [*texts, b"\x00\x01"]
        assert library_sends == ["binary"]

    asyncio.run(scenario())


def test_a_send_after_the_client_closed_is_answered_as_uvicorn_answers_it() -> None:
    """Once the client's close arrived, a text message is not framed here: uvicorn's own send
    runs and raises its disconnect error to the application, as without this path."""
    from uvicorn.protocols.utils import ClientDisconnected
    from websockets.asyncio.client import connect

    from relaycore.connection_limits import BoundedWebSocketProtocol

    raised: list[type[BaseException]] = []
    closed_seen = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return
        await receive()
        await send({"type": "websocket.accept"})
        message = await receive()
        assert message["type"] == "websocket.disconnect"
        try:
            await send({"type": "websocket.send", "text": "too late"})
        except BaseException as exc:
            raised.append(type(exc))
            raise
        finally:
            closed_seen.set()

    async def scenario() -> None:
        async with serving(app, BoundedWebSocketProtocol) as port:
            async with connect(f"ws://127.0.0.1:{port}/", compression=None):
                pass
            await asyncio.wait_for(closed_seen.wait(), 5)
        assert raised == [ClientDisconnected]

    asyncio.run(scenario())
