"""The live publisher (artifacts/ws/publish.py): commits queued behind a busy publish go out
merged, in order, each event once, over the real Redis channel layer."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from channels.layers import get_channel_layer
from django.conf import settings
from hypothesis import given
from hypothesis import strategies as st

from artifacts.ws import publish
from artifacts.ws.filters import LiveEvent
from artifacts.ws.publish import MAX_MERGED_EVENTS, LiveMessage, merged

LAYERS = ("layer a", "layer b")


def live_event(n: int) -> LiveEvent:
    return LiveEvent(id=f"{n:064x}", pubkey="p" * 64, kind=45010, created_at=n,
                     channel_id="h", artifact_id=f"d{n}", artifact_type="buzz.task", raw="{}")


@st.composite
def batches(draw: st.DrawFn) -> list[tuple[Any, str, LiveMessage]]:
    batch = []
    n = 0
    for _ in range(draw(st.integers(0, 40))):
        # As the receivers publish: events (a commit's, up to a big one), an access change
        # (with or without events), never neither.
        access = draw(st.sampled_from([[], [], ["h"], [publish.EVERY_CHANNEL]]))
        size = draw(st.integers(0 if access else 1, 3 if draw(st.booleans()) else 90))
        events = []
        for _ in range(size):
            n += 1
            events.append(live_event(n))
        batch.append((draw(st.sampled_from(LAYERS)), draw(st.sampled_from(["g1", "g2"])),
                      LiveMessage(1, events=events, access=access, sent_at=draw(st.floats(0, 9)))))
    return batch


def stream(batch: list[tuple[Any, str, LiveMessage]], layer: Any, group: str) -> list[Any]:
    """What one group's hubs on one layer are told, in order: events and access changes."""
    told: list[Any] = []
    for each_layer, each_group, message in batch:
        if each_layer is layer and each_group == group:
            told += [("access", tuple(message.access))] if message.access else []
            told += [event.id for event in message.events]
    return told


def submit_commits(publisher: Any, layer: Any, group: str, count: int) -> None:
    """`count` one-event commits to `group`, submitted back to back."""
    for n in range(1, count + 1):
        publisher.submit(layer, group, LiveMessage(1, events=[live_event(n)], sent_at=time.time()))


async def receive_commits(layer: Any, channel: str, count: int) -> list[dict[str, Any]]:
    """The messages `channel` receives until they hold `count` events."""
    received: list[dict[str, Any]] = []
    while sum(len(m["events"]) for m in received) < count:
        received.append(await asyncio.wait_for(layer.receive(channel), 5))
    return received


@given(batches())
def test_merging_tells_every_group_the_same_things_in_the_same_order(
    batch: list[tuple[Any, str, LiveMessage]],
) -> None:
    out = merged(batch)
    for layer in LAYERS:
        for group in ("g1", "g2"):
            assert stream(out, layer, group) == stream(batch, layer, group)
    # Only event-only messages merge, and a merged message is bounded and keeps the oldest time.
    for _, _, message in out:
        if message not in [m for _, _, m in batch]:
            assert not message.access and len(message.events) <= MAX_MERGED_EVENTS
            sources = [m for _, _, m in batch if set(e.id for e in m.events) & {
                e.id for e in message.events}]
            assert message.sent_at == min(m.sent_at for m in sources)
    assert len(out) <= len(batch)


@pytest.mark.skipif(not settings.CONFIG.redis_url, reason="the Redis channel layer")
def test_commits_queued_behind_a_busy_publisher_arrive_merged_in_order_and_complete() -> None:
    layer = get_channel_layer()
    group = f"test-publish-{time.monotonic_ns()}"
    publisher = publish._publisher(None)  # a database thread's: the publisher thread's
    count = 120

    async def listen() -> list[dict[str, Any]]:
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        try:
            # The publisher is busy (its loop sleeps) while every commit is submitted.
            publisher.loop.call_soon_threadsafe(time.sleep, 0.3)
            submit_commits(publisher, layer, group, count)
            return await receive_commits(layer, channel, count)
        finally:
            await layer.group_discard(group, channel)

    received = asyncio.run(listen())
    publisher.flush()
    ids = [entry["id"] for message in received for entry in message["events"]]
    assert ids == [live_event(n).id for n in range(1, count + 1)]
    assert len(received) == 1  # one INCR and one PUBLISH for the whole backlog
    sequence = [message["seq"] for message in received]
    assert sequence == sorted(sequence) and not any(m["lost"] for m in received)


@pytest.mark.skipif(not settings.CONFIG.redis_url, reason="the Redis channel layer")
def test_commits_on_the_serving_loop_are_published_by_that_loop_merged_in_order() -> None:
    """A write committed on the server loop (`async_ingest`) is numbered and published there,
    not handed to the publisher thread; commits submitted before the loop gets to them go out
    as one message, in order."""
    layer = get_channel_layer()
    group = f"test-publish-loop-{time.monotonic_ns()}"
    count = 50

    on_loop: list[Any] = []

    async def run() -> list[dict[str, Any]]:
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        try:
            publisher = publish._publisher(publish._running_loop())  # as `_publish` picks it
            assert publisher.loop is asyncio.get_running_loop()
            assert publish._publisher(asyncio.get_running_loop()) is publisher
            on_loop.append(publisher)
            submit_commits(publisher, layer, group, count)  # no await: the drain waits
            await publish.finish_publishing()
            assert not publisher.draining and not publisher.queue
            return await receive_commits(layer, channel, count)
        finally:
            await layer.group_discard(group, channel)

    received = asyncio.run(run())
    assert [entry["id"] for message in received for entry in message["events"]] == [
        live_event(n).id for n in range(1, count + 1)]
    assert len(received) == 1 and received[0]["seq"] > 0 and not received[0]["lost"]
    # A database thread's write (no running loop) goes to the publisher thread instead.
    thread_publisher = publish._publisher(None)
    assert thread_publisher is not on_loop[0] and thread_publisher.loop.is_running()


@pytest.mark.skipif(not settings.CONFIG.redis_url, reason="the Redis channel layer")
def test_sequence_numbers_asked_in_one_turn_are_consecutive_in_the_order_asked() -> None:
    """The loop's lean Redis connection writes the INCRs asked in one turn together: Redis
    answers them in order, so each caller gets its own number, in the order asked, from the one
    counter every instance (and `current_sequence`) reads."""
    group = f"test-publish-sequence-{time.monotonic_ns()}"

    async def ask() -> list[int]:
        return list(await asyncio.gather(*(publish.next_sequence(group) for _ in range(20))))

    numbers = asyncio.run(ask())
    assert numbers == list(range(numbers[0], numbers[0] + 20))
    assert publish.current_sequence(group) == numbers[-1]
    assert asyncio.run(ask())[0] == numbers[-1] + 1


@pytest.mark.skipif(not settings.CONFIG.redis_url, reason="the Redis channel layer")
def test_a_redis_that_stops_answering_bounds_the_publish_opens_the_breaker_and_flags_the_loss(
) -> None:
    """Redis paused for writes (as a partition looks to a client): numbering gives up within
    the publish timeout, the breaker opens (later publishes do not each wait), and the group is
    flagged lost so the next message that gets through tells its hubs."""
    from relaycore import redis_clients

    layer = get_channel_layer()
    group = f"test-publish-paused-{time.monotonic_ns()}"
    admin = redis_clients.redis_client()
    assert admin is not None

    async def publish_while_paused() -> float:
        admin.execute_command("CLIENT", "PAUSE", 3000, "WRITE")  # INCR is a write
        started = time.monotonic()
        await publish._send(layer, group, LiveMessage(1, events=[live_event(1)],
                                                      sent_at=time.time()))
        return time.monotonic() - started

    try:
        elapsed = asyncio.run(publish_while_paused())
        # The client's socket timeout (0.5 s) or the publish timeout, whichever comes first.
        assert elapsed < publish.PUBLISH_TIMEOUT + 0.5
        assert group in publish._lost_groups
        with pytest.raises(redis_clients.RedisUnavailable):
            redis_clients.async_redis_client()
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        redis_clients._redis_down_until = 0.0
        publish._lost_groups.discard(group)


@pytest.mark.skipif(not settings.CONFIG.redis_url, reason="the Redis channel layer")
def test_the_servers_shutdown_reaches_the_application_once_the_loops_publisher_is_done() -> None:
    layer = get_channel_layer()
    group = f"test-publish-shutdown-{time.monotonic_ns()}"
    seen: list[tuple[str, bool]] = []

    async def lifespan_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            publisher = publish._publisher(asyncio.get_running_loop())
            seen.append((message["type"], publisher.draining or bool(publisher.queue)))
            if message["type"] == "lifespan.shutdown":
                return

    async def serve() -> None:
        messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

        async def receive() -> dict[str, Any]:
            message = messages.pop(0)
            if message["type"] == "lifespan.shutdown":  # the last writes' commits are queued
                submit_commits(publish._publisher(asyncio.get_running_loop()), layer, group, 20)
            return message

        app = publish.publishing_finished_at_shutdown(lifespan_app)
        await app({"type": "lifespan"}, receive, None)

    asyncio.run(serve())
    assert seen == [("lifespan.startup", False), ("lifespan.shutdown", False)]
