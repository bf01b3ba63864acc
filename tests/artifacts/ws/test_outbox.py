"""The per-connection outbox: replies always queued, live events dropped (and counted) when
the client is slow, one NOTICE once it catches up, frames in order, never blocking the
producer, and no task switch at all while the client keeps up."""

from __future__ import annotations

import asyncio

import orjson
from prometheus_client import REGISTRY

from artifacts.ws.outbox import NOTICE_INTERVAL, Outbox


class Socket:
    """A fake server send: instant while open, waiting while `blocked` is clear."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.open = asyncio.Event()
        self.open.set()

    async def send(self, frame: str) -> None:
        await self.open.wait()
        self.sent.append(frame)


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_client_that_keeps_up_gets_frames_synchronously() -> None:
    async def scenario() -> None:
        socket = Socket()
        outbox = Outbox(socket.send, max_live=3, max_bytes=10_000)
        outbox.put_reply("r0")
        outbox.put_live("l0")
        # Sent within the calls themselves: no task left behind.
        assert socket.sent == ["r0", "l0"] and outbox.idle

    asyncio.run(scenario())


def test_live_overflow_is_dropped_then_reported_once() -> None:
    async def scenario() -> None:
        socket = Socket()
        outbox = Outbox(socket.send, max_live=3, max_bytes=10_000)
        socket.open.clear()
        outbox.put_reply("r0")  # the drain now waits in send("r0")
        dropped = REGISTRY.get_sample_value("buzz_hub_drops_total", {"cause": "slow_client"})
        accepted = [outbox.put_live(f"l{n}") for n in range(5)]
        assert accepted == [True, True, True, False, False]
        # Counted for Prometheus too, as the slow client's.
        assert REGISTRY.get_sample_value(
            "buzz_hub_drops_total", {"cause": "slow_client"}
        ) == (dropped or 0) + 2
        assert outbox.put_reply("r1")  # replies are never dropped
        assert not outbox.idle and socket.sent == []
        socket.open.set()
        await _settle()
        assert socket.sent[:5] == ["r0", "l0", "l1", "l2", "r1"]
        notice = orjson.loads(socket.sent[5])
        assert notice[0] == "NOTICE" and notice[1].startswith("error: 2 live event")
        assert len(socket.sent) == 6 and outbox.idle
        # Caught up: nothing more is dropped.
        assert outbox.put_live("l5") and socket.sent[-1] == "l5"

    asyncio.run(scenario())


def test_a_client_that_does_not_read_is_detected_by_queued_bytes() -> None:
    async def scenario() -> None:
        socket = Socket()
        socket.open.clear()
        outbox = Outbox(socket.send, max_live=1000, max_bytes=100)
        assert outbox.put_reply("x" * 60)  # in flight
        assert outbox.put_reply("y" * 60)
        assert outbox.put_reply("z" * 40)
        assert not outbox.put_reply("w" * 10)  # over max_bytes: the connection closes it
        assert not outbox.put_live("v")  # live frames count against the bytes too
        outbox.close()
        await _settle()
        assert socket.sent == [] and outbox.idle

    asyncio.run(scenario())


def test_losses_upstream_get_the_same_notice() -> None:
    async def scenario() -> None:
        socket = Socket()
        outbox = Outbox(socket.send, max_live=10, max_bytes=10_000)
        outbox.drop_counted(4)
        assert len(socket.sent) == 1 and "4 live event" in orjson.loads(socket.sent[0])[1]

    asyncio.run(scenario())


def test_a_failing_send_closes_the_outbox() -> None:
    async def scenario() -> None:
        async def broken(frame: str) -> None:
            raise ConnectionResetError("gone")

        outbox = Outbox(broken, max_live=10, max_bytes=10_000)
        outbox.put_reply("a")
        assert outbox.closed and outbox.idle
        assert not outbox.put_live("b")

    asyncio.run(scenario())


def test_loss_notices_are_summed_not_repeated() -> None:
    async def scenario() -> None:
        socket = Socket()
        outbox = Outbox(socket.send, max_live=10, max_bytes=10_000)
        outbox.drop_counted(1)
        outbox.drop_counted(2)
        outbox.drop_counted(3)
        assert len(socket.sent) == 1 and "1 live event" in socket.sent[0]
        outbox.put_live("still delivered")
        assert socket.sent[-1] == "still delivered"
        await asyncio.sleep(NOTICE_INTERVAL + 0.1)
        assert len(socket.sent) == 3 and "5 live event" in socket.sent[-1]

    asyncio.run(scenario())


def test_a_replay_waits_below_its_mark_until_the_client_reads_or_goes_away() -> None:
    async def scenario() -> None:
        socket = Socket()
        socket.open.clear()  # the client reads nothing
        outbox = Outbox(socket.send, max_live=3, max_bytes=10_000)
        for n in range(5):
            outbox.put_reply(f"frame-{n}")  # 7 bytes each
        waiter = asyncio.ensure_future(outbox.below(14))
        await _settle()
        assert not waiter.done() and outbox.queued_bytes == 28  # one frame is being sent
        socket.open.set()  # it reads: the queue drains to the mark
        await _settle()
        assert waiter.done() and waiter.result() is True
        assert socket.sent == [f"frame-{n}" for n in range(5)]

        socket.open.clear()
        for n in range(5):
            outbox.put_reply(f"frame-{n}")
        waiter = asyncio.ensure_future(outbox.below(0))
        await _settle()
        outbox.close()  # the connection is dropped: the replay stops waiting
        await _settle()
        assert waiter.result() is False and outbox.queued_bytes == 0

    asyncio.run(scenario())


def test_replies_queued_together_go_out_in_order_by_one_drain() -> None:
    async def scenario() -> None:
        socket = Socket()
        outbox = Outbox(socket.send, max_live=3, max_bytes=10_000)
        kicks = 0
        kick = outbox._kick

        def counting_kick() -> None:
            nonlocal kicks
            kicks += 1
            kick()

        outbox._kick = counting_kick  # type: ignore[method-assign]
        assert outbox.put_replies(["e0", "e1", "e2"])
        assert socket.sent == ["e0", "e1", "e2"] and outbox.idle and kicks == 1
        assert outbox.put_replies([]) and kicks == 1
        # Behind a frame in flight they wait, in order, counted in the queued bytes.
        socket.open.clear()
        outbox.put_reply("r0")
        assert outbox.put_replies(["e3", "e4"])
        assert outbox.queued_bytes == 4
        socket.open.set()
        await _settle()
        assert socket.sent[3:] == ["r0", "e3", "e4"] and outbox.queued_bytes == 0

    asyncio.run(scenario())


def test_replies_queued_together_past_max_bytes_say_the_client_is_not_reading() -> None:
    async def scenario() -> None:
        socket = Socket()
        socket.open.clear()
        outbox = Outbox(socket.send, max_live=1000, max_bytes=100)
        assert outbox.put_replies(["x" * 60, "y" * 60])  # x in flight, y queued
        assert not outbox.put_replies(["z" * 50])  # over max_bytes: the connection closes it

    asyncio.run(scenario())
