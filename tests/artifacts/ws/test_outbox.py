"""The per-connection outbox: replies always queued, live events dropped (and counted) when
the client is slow, one NOTICE once it catches up, never blocking the producer."""

from __future__ import annotations

import asyncio

import orjson

from artifacts.ws.outbox import Outbox


async def _run_blocked(outbox: Outbox) -> tuple[list[str], asyncio.Event, asyncio.Task[None]]:
    sent: list[str] = []
    gate = asyncio.Event()

    async def send(frame: str) -> None:
        await gate.wait()
        sent.append(frame)

    task = asyncio.create_task(outbox.run(send))
    await asyncio.sleep(0)
    return sent, gate, task


def test_live_overflow_is_dropped_then_reported_once() -> None:
    async def scenario() -> None:
        outbox = Outbox(max_live=3, max_bytes=10_000)
        sent, gate, task = await _run_blocked(outbox)
        outbox.put_reply("r0")
        await asyncio.sleep(0)  # the writer takes r0 and blocks sending it
        accepted = [outbox.put_live(f"l{n}") for n in range(5)]
        assert accepted == [True, True, True, False, False]
        assert outbox.put_reply("r1")  # replies are never dropped
        gate.set()
        for _ in range(20):
            await asyncio.sleep(0)
        assert sent[:5] == ["r0", "l0", "l1", "l2", "r1"]
        notice = orjson.loads(sent[5])
        assert notice[0] == "NOTICE" and notice[1].startswith("error: 2 live event")
        assert len(sent) == 6
        # Caught up: nothing more is dropped.
        assert outbox.put_live("l5")
        for _ in range(5):
            await asyncio.sleep(0)
        assert sent[-1] == "l5"
        task.cancel()

    asyncio.run(scenario())


def test_a_client_that_does_not_read_is_detected_by_queued_bytes() -> None:
    async def scenario() -> None:
        outbox = Outbox(max_live=1000, max_bytes=100)
        _, _, task = await _run_blocked(outbox)
        assert outbox.put_reply("x" * 60)
        await asyncio.sleep(0)
        assert outbox.put_reply("y" * 60)
        assert not outbox.put_reply("z" * 60)  # over max_bytes: the connection closes it
        assert not outbox.put_live("w" * 10)  # live frames count against the bytes too
        task.cancel()

    asyncio.run(scenario())


def test_losses_upstream_get_the_same_notice() -> None:
    async def scenario() -> None:
        outbox = Outbox(max_live=10, max_bytes=10_000)
        sent, gate, task = await _run_blocked(outbox)
        gate.set()
        outbox.drop_counted(4)
        for _ in range(5):
            await asyncio.sleep(0)
        assert len(sent) == 1 and "4 live event" in orjson.loads(sent[0])[1]
        task.cancel()

    asyncio.run(scenario())
