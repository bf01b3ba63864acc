"""The relay's WebSocket at `/`: NIP-01 and NIP-42 for the artifact sync (PROTOCOL.md section 8).

One consumer per connection. It parses (artifacts.ws.messages), authorizes and makes one call:
the ingest service for EVENT, the replay selector for REQ; live events come from the process's
hub (artifacts.ws.hub), which hands each committed event to `deliver`. Everything the client
receives goes through the connection's bounded outbox (artifacts.ws.outbox).

Several pubkeys may authenticate on one connection; a subscription is served what ANY of them
may read (open channels, and private channels where one of them is an active member), and an
EVENT is accepted from any of them.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db import DatabaseError

from artifacts.selectors.communities import community_for_host
from artifacts.selectors.replay import ChannelState, ReplayRow, replay_events
from artifacts.selectors.standby import primary_position
from artifacts.services.loop_ingest import ingest_on_loop
from artifacts.signals import MEMBER
from artifacts.ws import shutdown
from artifacts.ws.filters import Filter, LiveEvent
from artifacts.ws.hints import changed_notice, concerns
from artifacts.ws.hub import SyncHub, get_hub
from artifacts.ws.messages import (
    AuthMessage,
    CloseMessage,
    EventMessage,
    RefusedMessage,
    ReqMessage,
    SyncLimits,
    auth_challenge,
    closed,
    eose,
    event_frame,
    message_size,
    notice,
    ok,
    parse_client_message,
    subscription_prefix,
)
from artifacts.ws.outbox import Outbox
from artifacts.ws.publish import LiveChange
from artifacts.ws.scope import client_address, public_host, public_relay_url
from nostr.nip42 import Nip42Error, verify_auth_event
from relaycore.dbthreads import run_db
from relaycore.metrics import HUB_DROPS_SLOW_CLIENT, WEBSOCKET_SUBSCRIPTIONS
from relaycore.ratelimit import address_wait, pubkey_wait

__all__ = ["SyncConsumer", "sync_limits"]

logger = logging.getLogger(__name__)

MAX_PUBKEYS = 32  # authenticated pubkeys per connection
# Defaults of settings.RELAY_WS_OUTBOX_MAX_LIVE / _MAX_BYTES: live frames waiting for a slow
# client before further ones are dropped, and queued bytes past which a client that does not
# read at all is disconnected. Per connection, so memory stays bounded by the socket count.
MAX_OUTBOX_LIVE = 1000
MAX_OUTBOX_BYTES = 16 * 1024 * 1024
MAX_PENDING_LIVE = 1000  # live frames held back while a subscription replays
# A replay is read in pages of about REPLAY_PAGE_BYTES (the rows per page follow the sizes
# seen, within REPLAY_MIN_PAGE..REPLAY_MAX_PAGE; the first page, sizes unknown, is small enough
# at the largest events), each frame queued only while the outbox holds at most REPLAY_WINDOW
# bytes: a replay holds about the window and a page per connection, whatever its size (the
# issue-37 measurement: queued at once, 8 non-reading clients of a 48 MiB channel held
# +512-685 MiB, and a reading one was closed for passing the outbox bound before EOSE).
REPLAY_WINDOW = 1024 * 1024
REPLAY_PAGE_BYTES = 512 * 1024
REPLAY_FIRST_PAGE = 16
REPLAY_MIN_PAGE = 16
REPLAY_MAX_PAGE = 500
CLOSE_GOING_AWAY = 1001
GOING_AWAY_REASON = "going away: the relay instance is shutting down"
CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009

RESTRICTED_CHANNELS = "restricted: none of the channels this subscription names is readable"
REVOKED_CHANNELS = "restricted: this connection can no longer read the channels it names"


def _rate_limited(wait: float) -> str:
    return f"rate-limited: slow down; retry in {max(1, math.ceil(wait))} s"


def sync_limits() -> SyncLimits:
    """The limits NIP-11 announces (buzzrelay.settings), read when a connection opens."""
    return SyncLimits(
        max_message_length=settings.RELAY_MAX_MESSAGE_LENGTH,
        max_subscriptions=settings.RELAY_MAX_SUBSCRIPTIONS,
        max_limit=settings.RELAY_MAX_LIMIT,
        max_subid_length=settings.RELAY_MAX_SUBID_LENGTH,
    )


@dataclass(slots=True, eq=False)
class Subscription:
    sub_id: str
    filters: tuple[Filter, ...]
    prefix: str
    # Every channel the filters name, or None when some filter names no `#h` (then the
    # subscription covers every readable channel and is never closed for access).
    named_channels: frozenset[str] | None
    # Live frames held back while the replay runs, sent after EOSE (None once live).
    pending: list[tuple[str, str]] | None = field(default_factory=list)
    pending_dropped: int = 0

    @classmethod
    def create(cls, sub_id: str, filters: tuple[Filter, ...]) -> Subscription:
        named: frozenset[str] | None = frozenset()
        for flt in filters:
            if flt.channels is None:
                named = None
                break
            named = named | flt.channels  # type: ignore[operator]
        return cls(sub_id, filters, subscription_prefix(sub_id), named)

    def covers(self, channel_ids: frozenset[str] | None) -> bool:
        if channel_ids is None or self.named_channels is None:
            return True
        return not self.named_channels.isdisjoint(channel_ids)


class SyncConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]
    # No per-connection channel-layer channel: the process's hub receives for every socket.
    channel_layer_alias = "buzz-sync-no-layer"

    community_id: int
    community: Any
    hub: SyncHub | None = None

    # Channels' own loop (`AsyncConsumer.__call__`) costs every client frame a task and an
    # `asyncio.wait` for its receive (`await_many_dispatch`, built to also read a channel-layer
    # channel this consumer does not have), and its `dispatch` a hop to asgiref's thread for
    # Django's `close_old_connections`, whose only connections there are those of sync code
    # run thread-sensitively, which this consumer never does (its database work runs on
    # `run_db`'s threads, which manage their own, and on the loop's asyncio pool). Measured
    # in-process (bench/profile_ws.py, docs/performance.md): those were the largest share of a
    # WebSocket EVENT's loop CPU outside the write itself. So frames are read and dispatched
    # here, one after another as Channels does, with its handlers (`websocket_connect`,
    # `websocket_receive`, `websocket_disconnect`, whose StopConsumer ends the loop).
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.scope = scope
        self.channel_layer = None
        self.base_send = send
        handlers = {
            "websocket.connect": self.websocket_connect,
            "websocket.receive": self.websocket_receive,
            "websocket.disconnect": self.websocket_disconnect,
        }
        try:
            while True:
                message = await receive()
                handler = handlers.get(message["type"])
                if handler is None:
                    raise ValueError(f"No handler for message type {message['type']}")
                await handler(message)
        except StopConsumer:
            pass

    async def connect(self) -> None:
        shutdown.handshake_started(self)
        try:
            await self._connect()
        finally:
            shutdown.handshake_done(self)

    async def _connect(self) -> None:
        self.outbox: Outbox | None = None
        self.subs: dict[str, Subscription] = {}
        # How many of `subs` the open-subscriptions gauge holds for this connection.
        self._counted_subs = 0
        self._disconnected = False
        self.pubkeys: set[str] = set()
        self.closing = False
        if not settings.RELAY_WEBSOCKET_SYNC or self.scope.get("path", "/") not in ("", "/"):
            await self.close()
            return
        try:
            community = await run_db(community_for_host, public_host(self.scope))
        except DatabaseError as exc:
            logger.warning("WebSocket refused: community lookup failed (%s)", exc)
            community = None
        if community is None:
            # Refusing before accept makes the server answer the upgrade with HTTP 403.
            await self.close()
            return
        if shutdown.draining():
            # The instance is stopping (a rolling restart) and its listener is still open for
            # the drain: a handshake it let in would get uvicorn's 500 when the shutdown
            # catches it. Told what a drained connection is told, the client goes elsewhere.
            await self.accept()
            await self.close(code=CLOSE_GOING_AWAY, reason=GOING_AWAY_REASON)
            return
        self.community = community
        self.community_id = community.id
        self.limits = sync_limits()
        self.relay_url = public_relay_url(self.scope)
        self.address = client_address(self.scope)
        self.challenge = secrets.token_urlsafe(24)
        self.outbox = Outbox(
            self._send_frame,
            max_live=getattr(settings, "RELAY_WS_OUTBOX_MAX_LIVE", MAX_OUTBOX_LIVE),
            max_bytes=getattr(settings, "RELAY_WS_OUTBOX_MAX_BYTES", MAX_OUTBOX_BYTES),
        )
        await self.accept()
        shutdown.register(self)
        self._reply(auth_challenge(self.challenge))

    async def disconnect(self, code: int) -> None:
        self.closing = True
        self._disconnected = True
        self._count_subscriptions()
        shutdown.unregister(self)
        if self.hub is not None:
            await self.hub.leave(self)
        if self.outbox is not None:
            self.outbox.close()

    def _count_subscriptions(self) -> None:
        """Bring the open-subscriptions gauge to this connection's share (called after every
        change of `subs`; none once disconnected, even if a REQ in flight adds one later)."""
        share = 0 if self._disconnected else len(self.subs)
        if share != self._counted_subs:
            WEBSOCKET_SUBSCRIPTIONS.inc(share - self._counted_subs)
            self._counted_subs = share

    async def _send_frame(self, frame: str) -> None:
        # Straight to the server: Channels' send() only wraps this same message (hot path).
        await self.base_send({"type": "websocket.send", "text": frame})

    def _reply(self, frame: str) -> None:
        assert self.outbox is not None
        if not self.outbox.put_reply(frame) and not self.closing:
            self.closing = True
            self._closer = asyncio.ensure_future(
                self._close(CLOSE_POLICY, "too slow: the client is not reading")
            )

    def _replies(self, frames: list[str]) -> None:
        """`_reply` for several frames, queued together (`Outbox.put_replies`)."""
        assert self.outbox is not None
        if not self.outbox.put_replies(frames) and not self.closing:
            self.closing = True
            self._closer = asyncio.ensure_future(
                self._close(CLOSE_POLICY, "too slow: the client is not reading")
            )

    async def _close(self, code: int, reason: str) -> None:
        self.closing = True
        if self.outbox is not None:
            self.outbox.close()
        try:
            await self.close(code=code, reason=reason)
        except Exception as exc:  # already gone
            logger.debug("WebSocket close failed: %s", exc)

    # Client messages ----------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.closing or self.outbox is None:
            return
        if text_data is None:
            size = len(bytes_data or b"")
            if size > self.limits.max_message_length:
                await self._too_big(size)
                return
            self._reply(notice("invalid: binary frames are not supported; send JSON text"))
            return
        size = len(text_data)
        if size * 3 > self.limits.max_message_length:  # a character is at most 3 UTF-8 bytes
            size = message_size(text_data)
        if size > self.limits.max_message_length:
            await self._too_big(size)
            return
        try:
            message = parse_client_message(text_data, self.limits)
        except RefusedMessage as refused:
            self._reply(refused.answer.frame())
            return
        if isinstance(message, ReqMessage):
            await self._req(message)
        elif isinstance(message, EventMessage):
            await self._event(message)
        elif isinstance(message, CloseMessage):
            self.subs.pop(message.sub_id, None)
            self._count_subscriptions()
        elif isinstance(message, AuthMessage):
            await self._auth(message)

    async def _too_big(self, size: int) -> None:
        limit = self.limits.max_message_length
        self._reply(notice(f"invalid: message of {size} bytes is over the {limit}-byte limit"))
        assert self.outbox is not None
        await self.outbox.drained(timeout=1.0)
        await self._close(CLOSE_TOO_BIG, "message too big")

    async def _address_wait(self) -> float | None:
        """The per-address limit HTTP applies, for work that costs a signature check or a read."""
        return await address_wait(self.address)

    async def _auth(self, message: AuthMessage) -> None:
        if (wait := await self._address_wait()) is not None:
            self._reply(ok(message.event_id, False, _rate_limited(wait)))
            return
        try:
            pubkey = verify_auth_event(
                message.event,
                challenge=self.challenge,
                relay_url=self.relay_url,
                now=int(time.time()),
            )
        except Nip42Error as exc:
            self._reply(ok(message.event_id, False, f"invalid: {exc}"))
            return
        if pubkey not in self.pubkeys and len(self.pubkeys) >= MAX_PUBKEYS:
            self._reply(
                ok(message.event_id, False, f"restricted: at most {MAX_PUBKEYS} pubkeys")
            )
            return
        self.pubkeys.add(pubkey)
        self._reply(ok(message.event_id, True, ""))

    async def _event(self, message: EventMessage) -> None:
        if not self.pubkeys:
            self._reply(
                ok(message.event_id, False, "auth-required: authenticate (NIP-42) to publish")
            )
            return
        author = message.event.get("pubkey")
        if author in self.pubkeys and (wait := await pubkey_wait(author)) is not None:
            self._reply(ok(message.event_id, False, _rate_limited(wait)))
            return
        try:
            result = await ingest_on_loop(
                community=self.community,
                raw=message.raw,
                parsed=message.event,
                authenticated_pubkeys=frozenset(self.pubkeys),
            )
        except DatabaseError as exc:
            logger.warning("WebSocket EVENT failed: %s", exc)
            self._reply(ok(message.event_id, False, "error: the event was not stored; retry"))
            return
        self._reply(orjson.dumps(result.as_ok()).decode())

    async def _req(self, message: ReqMessage) -> None:
        sub_id = message.sub_id
        if not self.pubkeys:
            self._reply(closed(sub_id, "auth-required: authenticate (NIP-42) to subscribe"))
            return
        if (wait := await self._address_wait()) is not None:
            self._reply(closed(sub_id, _rate_limited(wait)))
            return
        if sub_id not in self.subs and len(self.subs) >= self.limits.max_subscriptions:
            self._reply(
                closed(
                    sub_id,
                    f"rate-limited: at most {self.limits.max_subscriptions} open subscriptions"
                    " per connection; CLOSE one first",
                )
            )
            return
        # NIP-01: a REQ with an id in use replaces that subscription.
        self.subs.pop(sub_id, None)
        self._count_subscriptions()
        sub = Subscription.create(sub_id, message.filters)
        hub = get_hub()
        try:
            # The client asked now: decide on the database's present state, not the cache's.
            if sub.named_channels is not None and not await self._any_readable(
                hub, sub.named_channels, fresh=True
            ):
                self._reply(closed(sub_id, RESTRICTED_CHANNELS))
                return
            if self.hub is None:
                try:
                    await hub.join(self)
                except DatabaseError:
                    raise
                except Exception as exc:  # the channel layer (Redis) is unavailable
                    logger.warning("WebSocket REQ: joining the live stream failed: %s", exc)
                    self._reply(closed(sub_id, "error: live events are unavailable; retry later"))
                    return
                self.hub = hub
            # Registered before the replay query: whatever commits after its snapshot arrives
            # live (held in `pending` until EOSE).
            self.subs[sub_id] = sub
            self._count_subscriptions()
            replayed = await self._replay(sub)
        except DatabaseError as exc:
            logger.warning("WebSocket REQ failed: %s", exc)
            if self.subs.get(sub_id) is sub:
                del self.subs[sub_id]
                self._count_subscriptions()
            self._reply(closed(sub_id, "error: the relay could not read; retry later"))
            return
        if replayed is None:
            return  # closed or replaced meanwhile, or the connection is closing
        self._reply(eose(sub_id))
        pending, sub.pending = sub.pending or [], None
        assert self.outbox is not None
        for event_id, frame in pending:
            if event_id not in replayed:
                self.outbox.put_live(frame)
        if sub.pending_dropped:
            self.outbox.drop_counted(sub.pending_dropped)

    def _replaying(self, sub: Subscription) -> bool:
        return not self.closing and self.subs.get(sub.sub_id) is sub

    async def _replay(self, sub: Subscription) -> set[str] | None:
        """Send the subscription's stored events (each filter's replay with its own `limit`,
        de-duplicated across filters) page by page: a page is read only once the client has
        read the frames before it down to the window (and a frame is queued only below it), so
        a replay of any size reaches a client that reads, and a client that does not costs at
        most the window, a frame and the page's rows.
        The ids sent; None when the subscription or the connection ended meanwhile."""
        assert self.outbox is not None
        pubkeys = frozenset(self.pubkeys)
        position: str | None = None
        first = True
        sent: set[str] = set()
        rows = REPLAY_FIRST_PAGE
        # Within the outbox's bound, with room for a frame of the largest size above it.
        window = min(REPLAY_WINDOW, self.outbox.max_bytes // 2)
        for flt in sub.filters:
            after: tuple[int, str] | None = None
            remaining = flt.limit
            while remaining > 0:
                if not await self.outbox.below(window) or not self._replaying(sub):
                    return None
                asked = min(rows, remaining)
                position, page = await run_db(
                    self._replay_page, flt, pubkeys, asked, after, position, first
                )
                first = False
                if not self._replaying(sub):
                    return None
                size = 0
                # The page's frames are queued together (one drain for all of them), each only
                # while what is queued, these included, stays within the window.
                frames: list[str] = []
                held = 0
                for _, event_id, raw in page:
                    size += len(raw)
                    if event_id in sent:
                        continue
                    if self.outbox.queued_bytes + held > window:
                        self._replies(frames)
                        frames, held = [], 0
                        if self.outbox.queued_bytes > window and (
                            not await self.outbox.below(window) or not self._replaying(sub)
                        ):
                            return None
                    sent.add(event_id)
                    frame = event_frame(sub.prefix, raw)
                    frames.append(frame)
                    held += len(frame)
                self._replies(frames)
                if len(page) < asked:
                    break
                remaining -= len(page)
                after = page[-1][0], page[-1][1]
                # Rows per page from the rows seen: about REPLAY_PAGE_BYTES a page.
                rows = max(REPLAY_MIN_PAGE, min(REPLAY_MAX_PAGE,
                                                REPLAY_PAGE_BYTES * len(page) // max(size, 1)))
        return sent

    def _replay_page(
        self,
        flt: Filter,
        pubkeys: frozenset[str],
        rows: int,
        after: tuple[int, str] | None,
        position: str | None,
        first: bool,
    ) -> tuple[str | None, list[ReplayRow]]:
        """One page of a filter's replay, and the primary's position it was read at.

        The subscription is already registered: a standby may serve the replay once it has
        replayed what the primary had committed when the first page was asked for (read then),
        and later commits arrive live."""
        if first:
            position = primary_position()
        return position, replay_events(
            community_id=self.community_id,
            pubkeys=pubkeys,
            kinds=flt.kinds,
            ids=flt.ids,
            authors=flt.authors,
            channels=flt.channels,
            artifacts=flt.artifacts,
            since=flt.since,
            until=flt.until,
            limit=rows,
            after=after,
            caught_up_to=position,
        )

    async def _any_readable(
        self, hub: SyncHub, channel_ids: frozenset[str], *, fresh: bool = False
    ) -> bool:
        policy = await hub.access.policy(self.community_id, fresh=fresh)
        if not policy.artifacts_enabled or not channel_ids:
            return False
        states = await hub.access.channels(self.community_id, channel_ids, fresh=fresh)
        return any(state.readable_by_any(self.pubkeys) for state in states.values())

    # Called by the hub ---------------------------------------------------------------------

    def deliver(self, event: LiveEvent, state: ChannelState) -> None:
        if self.closing or not self.subs or not state.readable_by_any(self.pubkeys):
            return
        for sub in self.subs.values():
            if any(flt.matches(event) for flt in sub.filters):
                self._put_live(sub, event)

    def _put_live(self, sub: Subscription, event: LiveEvent) -> None:
        """Queue a live event for `sub`, or hold it back while `sub` still replays."""
        assert self.outbox is not None
        frame = event_frame(sub.prefix, event.raw)
        if sub.pending is None:
            self.outbox.put_live(frame)
        elif len(sub.pending) < MAX_PENDING_LIVE:
            sub.pending.append((event.id, frame))
        else:
            sub.pending_dropped += 1
            HUB_DROPS_SLOW_CLIENT.inc()

    def live_missed(self, count: int) -> None:
        if self.subs and self.outbox is not None and not self.closing:
            self.outbox.drop_counted(count)

    async def access_changed(
        self, channel_ids: frozenset[str] | None, changes: Sequence[LiveChange] = ()
    ) -> None:
        """Re-check the subscriptions that name a channel whose access may have changed, and
        tell this connection of the changes of its own access (PROTOCOL.md section 8).

        Delivery itself checks every event against the hub's fresh channel state; what is left
        here is to close the subscriptions none of whose named channels stays readable, and to
        hint the others: the change's stored event to a subscription that names its kind, else
        one NOTICE `changed:` (artifacts.ws.hints).
        """
        if self.closing or self.hub is None:
            return
        revoked = []
        for sub in list(self.subs.values()):
            if sub.named_channels is None or not sub.covers(channel_ids):
                continue
            if not await self._any_readable(self.hub, sub.named_channels):
                revoked.append(sub)
        for change in changes:
            await self._hint(change, revoked)
        for sub in revoked:
            if self.subs.get(sub.sub_id) is sub:
                del self.subs[sub.sub_id]
                self._count_subscriptions()
                self._reply(closed(sub.sub_id, REVOKED_CHANNELS))

    async def _hint(self, change: LiveChange, revoked: list[Subscription]) -> None:
        assert self.hub is not None and self.outbox is not None
        covering = [
            sub for sub in self.subs.values() if sub.covers(frozenset((change.channel_id,)))
        ]
        if not covering:
            return
        state = None
        if change.what != MEMBER:
            state = await self.hub.access.channel(self.community_id, change.channel_id)
        if not concerns(change, state, self.pubkeys):
            return
        told = False
        for sub in covering:
            event = change.event
            if event is not None and any(flt.matches(event) for flt in sub.filters):
                self._put_live(sub, event)
            elif sub not in revoked and not told:  # a revoked one hears its CLOSED
                told = True
                self.outbox.put_live(notice(changed_notice(change)))

    async def going_away(self) -> None:
        """The process is shutting down: flush, then close with 1001."""
        if self.closing or self.outbox is None:
            return
        self.closing = True
        await self.outbox.drained(timeout=shutdown.DRAIN_SECONDS / 2)
        await self._close(CLOSE_GOING_AWAY, GOING_AWAY_REASON)
