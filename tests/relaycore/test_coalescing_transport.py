"""The WebSocket protocol's transport (`CoalescingTransport`): a turn's first write goes out at
once, the writes after it in the same turn go out together at the next turn, in order; close
writes what is held first, abort drops it; and a long turn holds at most HELD_MAX_BYTES, so the
transport's flow control sees the rest."""

from __future__ import annotations

import asyncio
from typing import Any

from relaycore.connection_limits import HELD_MAX_BYTES, CoalescingTransport
from tests.relaycore.uvicorn_app import serving


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closing = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        assert not self.closing
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = self.aborted = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 9) if name == "peername" else default


def _coalescing() -> tuple[CoalescingTransport, FakeTransport]:
    fake = FakeTransport()
    transport = CoalescingTransport(fake, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.coalescing = True  # as around an application's send
    return transport, fake


def test_a_lone_write_goes_out_at_once_and_a_burst_in_one_write_after_it() -> None:
    async def scenario() -> None:
        transport, fake = _coalescing()
        transport.write(b"a")
        assert fake.writes == [b"a"]  # nothing waits for the next turn
        transport.write(b"b")
        transport.write(b"c")
        assert fake.writes == [b"a"]
        await asyncio.sleep(0)
        assert fake.writes == [b"a", b"bc"]
        # A new turn: its first write goes out at once again.
        await asyncio.sleep(0)
        transport.write(b"d")
        assert fake.writes == [b"a", b"bc", b"d"]

    asyncio.run(scenario())


def test_a_long_turn_holds_back_at_most_the_limit() -> None:
    """Past HELD_MAX_BYTES, what is held goes to the transport within the same turn (in order),
    where its buffer's flow control can pause the sender."""

    async def scenario() -> None:
        transport, fake = _coalescing()
        frame = b"x" * 1000
        count = 3 * HELD_MAX_BYTES // len(frame)
        for _ in range(count):
            transport.write(frame)
        written = sum(map(len, fake.writes))
        assert count * len(frame) - written <= HELD_MAX_BYTES  # still in the same turn
        assert len(fake.writes) >= 3
        await asyncio.sleep(0)
        assert b"".join(fake.writes) == frame * count

    asyncio.run(scenario())


def test_close_writes_what_is_held_first_and_abort_drops_it() -> None:
    async def scenario() -> None:
        transport, fake = _coalescing()
        transport.write(b"a")
        transport.write(b"b")
        transport.close()
        assert fake.writes == [b"a", b"b"] and fake.closing
        await asyncio.sleep(0)  # the turn's end writes nothing to a closed transport
        assert fake.writes == [b"a", b"b"]

        transport, fake = _coalescing()
        transport.write(b"a")
        transport.write(b"b")
        transport.abort()
        await asyncio.sleep(0)
        assert fake.writes == [b"a"] and fake.aborted

    asyncio.run(scenario())


def test_other_writes_go_out_at_once_after_what_is_held() -> None:
    async def scenario() -> None:
        transport, fake = _coalescing()
        transport.write(b"a")
        transport.write(b"b")
        transport.coalescing = False  # a pong, a close frame
        transport.write(b"pong")
        transport.write(b"pong2")
        assert fake.writes == [b"a", b"b", b"pong", b"pong2"]
        await asyncio.sleep(0)
        assert fake.writes == [b"a", b"b", b"pong", b"pong2"]

    asyncio.run(scenario())


def test_everything_else_is_the_transports() -> None:
    async def scenario() -> None:
        transport, fake = _coalescing()
        assert transport.get_extra_info("peername") == ("127.0.0.1", 9)
        assert not transport.is_closing()
        fake.closing = True
        assert transport.is_closing()

    asyncio.run(scenario())


def test_the_websocket_protocol_writes_an_applications_burst_of_frames_together() -> None:
    """Through uvicorn (websockets-sansio, BoundedWebSocketProtocol): 50 frames sent in one turn
    reach the client whole and in order, in at most two writes to the socket's transport."""
    from websockets.asyncio.client import connect

    from relaycore.connection_limits import BoundedWebSocketProtocol

    frame_writes: list[int] = []

    class Counting(BoundedWebSocketProtocol):  # type: ignore[misc]
        def connection_made(self, transport: Any) -> None:
            real_write = transport.write

            def write(data: bytes) -> None:
                if b"frame " in data:  # not the handshake's response, nor the close frame
                    frame_writes.append(data.count(b"frame "))
                real_write(data)

            transport.write = write
            super().connection_made(transport)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return
        await receive()
        await send({"type": "websocket.accept"})
        for n in range(50):
            await send({"type": "websocket.send", "text": f"frame {n}"})
        await receive()

    async def scenario() -> None:
        async with (serving(app, Counting) as port,
                    connect(f"ws://127.0.0.1:{port}/", compression=None) as ws):
            got = [await ws.recv() for _ in range(50)]
        assert got == [f"frame {n}" for n in range(50)]
        # The turn's first frame at once, the other 49 together (a write each before).
        assert frame_writes == [1, 49], frame_writes

    asyncio.run(scenario())


def test_an_application_that_never_yields_is_paused_by_a_client_that_does_not_read() -> None:
    """Through uvicorn: an application sending 64 MiB of frames back to back, in one turn for as
    long as its sends do not suspend, to a client that reads nothing is paused (its send waits)
    once the socket's and the transport's buffers are full; it does not hand every frame over,
    held in memory until its turn ends."""
    import socket

    from websockets.asyncio.client import connect

    from relaycore.connection_limits import BoundedWebSocketProtocol

    frame = "f" * 16 * 1024
    total = 4096  # 64 MiB
    handed_over = [0]
    paused = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return
        await receive()
        await send({"type": "websocket.accept"})
        for _ in range(total):
            try:
                await asyncio.wait_for(send({"type": "websocket.send", "text": frame}), 1.0)
            except TimeoutError:  # waited for the client
                paused.set()
                break
            handed_over[0] += 1
        await receive()

    async def scenario() -> None:
        async with (serving(app, BoundedWebSocketProtocol) as port,
                    connect(f"ws://127.0.0.1:{port}/", compression=None, max_size=None,
                            max_queue=1) as ws):
            sock = ws.transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            ws.transport.pause_reading()  # the client reads nothing
            await asyncio.wait_for(paused.wait(), 20)
        assert handed_over[0] < total // 2, handed_over[0]

    asyncio.run(scenario())
