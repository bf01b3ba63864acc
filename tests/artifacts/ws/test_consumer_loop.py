"""The sync consumer reads and dispatches its own frames (`SyncConsumer.__call__`): in order,
each handled before the next is read, ended by the disconnect, and without Channels' per-frame
hop to asgiref's thread for `close_old_connections`. In process, no database: the connection's
own handlers are stood in for."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from artifacts.ws.consumer import SyncConsumer


class Recording(SyncConsumer):
    async def connect(self) -> None:
        self.got: list[str | None] = []
        self.busy = False
        await self.accept()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        assert not self.busy  # the previous frame's handler has returned
        self.busy = True
        await asyncio.sleep(0)
        self.got.append(text_data)
        self.busy = False

    async def disconnect(self, code: int) -> None:
        self.closed_with = code


def test_frames_are_dispatched_in_order_without_a_thread_hop_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hops = 0

    async def counted() -> None:
        nonlocal hops
        hops += 1

    async def nothing() -> None:
        return None

    import channels.consumer
    import channels.generic.websocket

    monkeypatch.setattr(channels.consumer, "aclose_old_connections", counted)
    monkeypatch.setattr(channels.generic.websocket, "aclose_old_connections", nothing)

    async def scenario() -> None:
        inbox: list[dict[str, Any]] = [
            {"type": "websocket.connect"},
            *({"type": "websocket.receive", "text": f"frame {n}"} for n in range(20)),
            {"type": "websocket.disconnect", "code": 1000},
        ]
        reads = 0
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            nonlocal reads
            reads += 1
            return inbox.pop(0)

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        consumer = Recording()
        await asyncio.wait_for(consumer({"type": "websocket", "path": "/"}, receive, send), 5)
        assert consumer.got == [f"frame {n}" for n in range(20)]
        assert consumer.closed_with == 1000
        assert reads == 22 and not inbox  # nothing read past the disconnect
        assert sent == [{"type": "websocket.accept", "subprotocol": None}]

    asyncio.run(scenario())
    assert hops == 0


def test_a_message_of_no_known_type_is_an_error() -> None:
    async def scenario() -> None:
        async def receive() -> dict[str, Any]:
            return {"type": "websocket.bogus"}

        async def send(message: dict[str, Any]) -> None:
            raise AssertionError(message)

        with pytest.raises(ValueError, match=r"websocket\.bogus"):
            await Recording()({"type": "websocket", "path": "/"}, receive, send)

    asyncio.run(scenario())
