"""Live fan-out, receiving side: one hub per relay process.

The hub holds ONE channel-layer channel and joins the group of every community that has a
subscribed connection in this process (coarse groups: one Redis subscription per community and
process, whatever the number of sockets). For each commit message it

1. accounts the group's sequence number (`SequenceTracker`): a message still missing after a
   grace period, or a publisher's own loss report, makes every local subscriber of the
   community get a NOTICE to run an HTTP round, and drops the cached access of the community;
2. applies access changes first (the commit's member/channel events): drops the cached state of
   the channels named and lets each connection re-check its subscriptions at once, and hear
   the changes of its own access (`changes`);
3. checks the community policy and the event's channel once, then hands the event to every
   local connection of the community, which matches its filters and queues frames without
   blocking (a slow socket only ever fills its own bounded outbox).

Messages are handled one at a time, in arrival order, so an access change is applied before the
events that follow it. A process that cannot keep up (its backlog of messages grows older than
`MAX_LAG_SECONDS`) does not deliver the stale events: it reports them as lost (NOTICE: run an
HTTP round), which empties the backlog quickly and bounds both memory and delivery latency.
Every readability change made through the write services (member and channel events, and
operators' edits, which store no event) arrives as an access message (`access_changed`). A
change made around the services (SQL by hand) is still noticed by a poll of the community's
listing version, policy and membership marks every `MARKS_POLL_SECONDS`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Protocol

from channels.layers import get_channel_layer

from artifacts.selectors.replay import (
    ChannelState,
    CommunityPolicy,
    access_marks,
    channel_states,
    community_policy,
)
from artifacts.ws.filters import LiveEvent
from artifacts.ws.publish import (
    EVERY_CHANNEL,
    LiveChange,
    LiveMessage,
    community_group,
    current_sequence,
)
from artifacts.ws.sequence import SequenceTracker
from nostr.kinds import KIND_REDACTION
from relaycore.dbthreads import run_db
from relaycore.metrics import HUB_DROPS_LOST, HUB_DROPS_STALE

__all__ = ["AccessCache", "HubClient", "SyncHub", "get_hub"]

logger = logging.getLogger(__name__)

SEQUENCE_GRACE_SECONDS = 1.0
# Live events published longer ago than this are reported lost instead of delivered (overload).
MAX_LAG_SECONDS = 5.0
ACCESS_TTL_SECONDS = 30.0
MARKS_POLL_SECONDS = 2.0
# InMemoryChannelLayer forgets group members after a day: re-join well before.
REJOIN_SECONDS = 3600.0


class HubClient(Protocol):
    """What the hub needs of a connection (artifacts.ws.consumer.SyncConsumer)."""

    community_id: int

    def deliver(self, event: LiveEvent, state: ChannelState) -> None: ...

    def live_missed(self, count: int) -> None: ...

    async def access_changed(
        self, channel_ids: frozenset[str] | None, changes: Sequence[LiveChange] = ()
    ) -> None: ...


class AccessCache:
    """Channel states and community policies, shared by the process's connections.

    Entries are dropped by access changes and expire after `ttl` as a backstop. A load that
    started before an invalidation of its community is used by its caller but not kept.
    """

    def __init__(self, ttl: float = ACCESS_TTL_SECONDS) -> None:
        self.ttl = ttl
        self._channels: dict[tuple[int, str], tuple[float, ChannelState]] = {}
        self._policies: dict[int, tuple[float, CommunityPolicy]] = {}
        self._generation: dict[int, int] = {}

    def invalidate(self, community_id: int, channel_ids: Collection[str] | None) -> None:
        self._generation[community_id] = self._generation.get(community_id, 0) + 1
        if channel_ids is None:
            self._policies.pop(community_id, None)
            for key in [k for k in self._channels if k[0] == community_id]:
                del self._channels[key]
        else:
            for channel_id in channel_ids:
                self._channels.pop((community_id, channel_id), None)

    def forget(self, community_id: int) -> None:
        self.invalidate(community_id, None)
        self._generation.pop(community_id, None)

    async def policy(self, community_id: int, *, fresh: bool = False) -> CommunityPolicy:
        now = time.monotonic()
        cached = self._policies.get(community_id)
        if not fresh and cached is not None and cached[0] > now:
            return cached[1]
        generation = self._generation.get(community_id, 0)
        policy = await run_db(community_policy, community_id=community_id)
        if self._generation.get(community_id, 0) == generation:
            self._policies[community_id] = (now + self.ttl, policy)
        return policy

    async def channels(
        self, community_id: int, channel_ids: Iterable[str], *, fresh: bool = False
    ) -> dict[str, ChannelState]:
        """States of `channel_ids`; `fresh` reads them all from the database (and keeps them)."""
        now = time.monotonic()
        found: dict[str, ChannelState] = {}
        missing: list[str] = []
        for channel_id in channel_ids:
            cached = self._channels.get((community_id, channel_id))
            if not fresh and cached is not None and cached[0] > now:
                found[channel_id] = cached[1]
            else:
                missing.append(channel_id)
        if missing:
            generation = self._generation.get(community_id, 0)
            loaded = await run_db(channel_states, community_id=community_id, channel_ids=missing)
            keep = self._generation.get(community_id, 0) == generation
            for channel_id, state in loaded.items():
                found[channel_id] = state
                if keep:
                    self._channels[(community_id, channel_id)] = (now + self.ttl, state)
        return found

    async def channel(self, community_id: int, channel_id: str) -> ChannelState:
        return (await self.channels(community_id, [channel_id]))[channel_id]


class SyncHub:
    def __init__(self) -> None:
        self.layer: Any = get_channel_layer()
        self.access = AccessCache()
        self._clients: dict[int, set[HubClient]] = {}
        self._trackers: dict[int, SequenceTracker] = {}
        self._marks: dict[int, tuple[Any, ...] | None] = {}
        self._channel: str | None = None
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []

    async def join(self, client: HubClient) -> None:
        """Start delivering `client`'s community to it (idempotent)."""
        community_id = client.community_id
        async with self._lock:
            if self._channel is None:
                self._channel = await self.layer.new_channel(prefix="buzzsync.hub.")
                self._tasks = [
                    asyncio.create_task(self._receive_forever(), name="buzz-sync-hub"),
                    asyncio.create_task(self._poll_forever(), name="buzz-sync-poll"),
                ]
            if community_id not in self._clients:
                group = community_group(community_id)
                # Join first, then read the baseline: a number handed out in between is at
                # worst reported as missing (a needless HTTP round), never silently lost.
                await self.layer.group_add(group, self._channel)
                baseline = await run_db(current_sequence, group)
                self._trackers[community_id] = SequenceTracker(
                    baseline, grace=SEQUENCE_GRACE_SECONDS
                )
                self._marks[community_id] = await self._read_marks(community_id)
                self._clients[community_id] = set()
            self._clients[community_id].add(client)

    async def leave(self, client: HubClient) -> None:
        community_id = client.community_id
        async with self._lock:
            clients = self._clients.get(community_id)
            if clients is None or client not in clients:
                return
            clients.discard(client)
            if clients:
                return
            del self._clients[community_id]
            self._trackers.pop(community_id, None)
            self._marks.pop(community_id, None)
            self.access.forget(community_id)
            if self._channel is not None:
                try:
                    await self.layer.group_discard(community_group(community_id), self._channel)
                except Exception as exc:
                    logger.warning("sync hub: leaving a group failed (%s)", exc)

    async def _receive_forever(self) -> None:
        assert self._channel is not None
        rejoined = time.monotonic()
        while True:
            try:
                message = await self.layer.receive(self._channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("sync hub: channel layer receive failed")
                await asyncio.sleep(1.0)
                continue
            try:
                await self.handle(message)
            except Exception:
                logger.exception("sync hub: a live message could not be handled")
            # A turn of the loop per message. A backlog's messages come from the layer's buffer
            # without a pause, and each one's frames reach a socket only as the loop turns:
            # handled in one turn, a backlog kept every subscriber waiting, its sockets unwritten
            # and its slow clients' drops unannounced, until the whole of it was fanned out.
            await asyncio.sleep(0)
            if time.monotonic() - rejoined > REJOIN_SECONDS:
                rejoined = time.monotonic()
                for community_id in list(self._clients):
                    await self.layer.group_add(community_group(community_id), self._channel)

    async def handle(self, layer_message: dict[str, Any]) -> None:
        message = LiveMessage.from_layer(layer_message)
        if message is None:
            return
        community_id = message.community_id
        tracker = self._trackers.get(community_id)
        if tracker is None:
            return  # no local subscriber any more
        now = time.monotonic()
        tracker.observe(message.seq, now)
        if message.lost:
            tracker.mark_lost()
        self._report_losses(community_id, now)
        if tracker.waiting:
            asyncio.get_running_loop().call_later(
                SEQUENCE_GRACE_SECONDS + 0.05, self._report_losses, community_id, None
            )
        access = message.access
        if access:
            await self._access_changed(
                community_id, None if EVERY_CHANNEL in access else frozenset(access),
                message.changes,
            )
        entries = message.events
        if not entries:
            return
        if time.time() - (message.sent_at or time.time()) > MAX_LAG_SECONDS:
            HUB_DROPS_STALE.inc(len(entries))
            for client in list(self._clients.get(community_id, ())):
                client.live_missed(len(entries))
            return
        await self._deliver(community_id, entries)

    def _report_losses(self, community_id: int, now: float | None) -> None:
        tracker = self._trackers.get(community_id)
        if tracker is None:
            return
        lost = tracker.take_lost(time.monotonic() if now is None else now)
        if not lost:
            return
        logger.warning("sync hub: %d live messages lost for community %d", lost, community_id)
        HUB_DROPS_LOST.inc(lost)
        # A lost message may have been an access change.
        self.access.invalidate(community_id, None)
        for client in list(self._clients.get(community_id, ())):
            client.live_missed(lost)

    async def _access_changed(
        self,
        community_id: int,
        channel_ids: frozenset[str] | None,
        changes: Sequence[LiveChange] = (),
    ) -> None:
        self.access.invalidate(community_id, channel_ids)
        for client in list(self._clients.get(community_id, ())):
            try:
                await client.access_changed(channel_ids, changes)
            except Exception:
                logger.exception("sync hub: an access re-check failed")

    async def _deliver(self, community_id: int, events: list[LiveEvent]) -> None:
        policy = await self.access.policy(community_id)
        for event in events:
            # A redaction names no artifact type: the stream serves it while artifacts are on.
            if event.kind == KIND_REDACTION:
                if not policy.artifacts_enabled:
                    continue
            elif not policy.allows(event.artifact_type):
                continue
            state = await self.access.channel(community_id, event.channel_id)
            if not state.exists:
                continue
            for client in list(self._clients.get(community_id, ())):
                client.deliver(event, state)

    async def _read_marks(self, community_id: int) -> tuple[Any, ...] | None:
        marks = await run_db(access_marks, community_ids=[community_id])
        return marks.get(community_id)

    async def _poll_forever(self) -> None:
        """Backstop for access changes that were not announced (see the module docstring)."""
        while True:
            await asyncio.sleep(MARKS_POLL_SECONDS)
            communities = list(self._clients)
            if not communities:
                continue
            try:
                marks = await run_db(access_marks, community_ids=communities)
            except Exception as exc:
                logger.warning("sync hub: access poll failed (%s)", exc)
                continue
            for community_id in communities:
                if community_id not in self._marks:
                    continue
                current = marks.get(community_id)
                if current != self._marks[community_id]:
                    self._marks[community_id] = current
                    await self._access_changed(community_id, None)


_hubs: dict[asyncio.AbstractEventLoop, SyncHub] = {}


def get_hub() -> SyncHub:
    """The hub of the running event loop (one per serving process)."""
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None:
        for stale in [other for other in _hubs if other.is_closed()]:
            del _hubs[stale]
        hub = _hubs[loop] = SyncHub()
    return hub
