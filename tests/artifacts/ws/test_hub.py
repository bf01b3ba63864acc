"""The hub's live-fan-out drops are counted by cause (`buzz_hub_drops_total`): a backlog older
than the lag bound (stale) and channel-layer messages that never arrived (lost). The hub is
driven with layer messages directly, as its receive loop would; no database is read (neither
path delivers)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from typing import Any

from prometheus_client import REGISTRY

from artifacts.ws.filters import LiveEvent
from artifacts.ws.hub import MAX_LAG_SECONDS, SEQUENCE_GRACE_SECONDS, SyncHub
from artifacts.ws.publish import LiveChange, LiveMessage
from artifacts.ws.sequence import SequenceTracker

COMMUNITY = 7


class Subscriber:
    community_id = COMMUNITY

    def __init__(self) -> None:
        self.missed: list[int] = []

    def deliver(self, event: object, state: object) -> None:
        raise AssertionError("nothing is delivered in these tests")

    def live_missed(self, count: int) -> None:
        self.missed.append(count)

    async def access_changed(
        self, channel_ids: frozenset[str] | None, changes: Sequence[LiveChange] = ()
    ) -> None:
        return None


def _drops(cause: str) -> float:
    return REGISTRY.get_sample_value("buzz_hub_drops_total", {"cause": cause}) or 0.0


def _event(n: int) -> LiveEvent:
    return LiveEvent(id=f"{n:064x}", pubkey="0" * 64, kind=45010, created_at=0,
                     channel_id="c", artifact_id=f"d{n}", artifact_type="buzz.task", raw="{}")


def _hub_with(subscribers: list[Subscriber]) -> SyncHub:
    hub = SyncHub()
    hub._trackers[COMMUNITY] = SequenceTracker(0, grace=SEQUENCE_GRACE_SECONDS)
    hub._clients[COMMUNITY] = set(subscribers)  # type: ignore[arg-type]
    return hub


def test_a_stale_backlog_counts_its_events_once_per_process() -> None:
    async def scenario() -> None:
        subscribers = [Subscriber(), Subscriber()]
        hub = _hub_with(subscribers)
        before = _drops("stale")
        message = LiveMessage(COMMUNITY, events=[_event(1), _event(2), _event(3)], seq=1,
                              sent_at=time.time() - MAX_LAG_SECONDS - 1)
        await hub.handle(message.to_layer())
        assert [s.missed for s in subscribers] == [[3], [3]]
        # Events not delivered by this process, however many of its sockets wanted them.
        assert _drops("stale") - before == 3

    asyncio.run(scenario())


def test_messages_missing_from_the_sequence_count_as_lost() -> None:
    async def scenario() -> None:
        subscriber = Subscriber()
        hub = _hub_with([subscriber])
        before = _drops("lost")
        await hub.handle(LiveMessage(COMMUNITY, seq=1, sent_at=time.time()).to_layer())
        # 2 and 3 never arrive; after the grace period they are reported lost.
        await hub.handle(LiveMessage(COMMUNITY, seq=4, sent_at=time.time()).to_layer())
        assert _drops("lost") == before
        await asyncio.sleep(SEQUENCE_GRACE_SECONDS + 0.2)
        assert _drops("lost") - before == 2
        assert subscriber.missed == [2]

    asyncio.run(scenario())


def test_the_loop_turns_between_two_messages_of_a_backlog() -> None:
    """Messages the layer hands over without a pause (a backlog in its buffer) are handled one
    loop turn each: sockets are written, and other connections served, between two of them."""

    class BufferedLayer:
        def __init__(self, messages: list[dict[str, object]]) -> None:
            self.messages = messages

        async def receive(self, channel: str) -> dict[str, object]:
            if self.messages:
                return self.messages.pop(0)
            await asyncio.Event().wait()  # the backlog is over
            raise AssertionError

    async def scenario() -> None:
        hub = _hub_with([Subscriber()])
        hub._channel = "hub"
        now = time.time()
        hub.layer = BufferedLayer(
            [LiveMessage(COMMUNITY, seq=n, sent_at=now).to_layer() for n in range(1, 6)])
        order: list[str] = []
        handle = hub.handle

        async def handled(message: dict[str, Any]) -> None:
            order.append("message")
            await handle(message)

        hub.handle = handled  # type: ignore[method-assign,assignment]

        async def other_connection() -> None:
            while True:
                order.append("turn")
                await asyncio.sleep(0)

        other = asyncio.create_task(other_connection())
        receiving = asyncio.create_task(hub._receive_forever())
        for _ in range(50):
            await asyncio.sleep(0)
        receiving.cancel()
        other.cancel()
        messages = [i for i, what in enumerate(order) if what == "message"]
        assert len(messages) == 5
        assert all(b - a > 1 for a, b in itertools.pairwise(messages)), order

    asyncio.run(scenario())
