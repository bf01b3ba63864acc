"""Live fan-out, publishing side: every committed write is announced to its community's group.

`artifacts.signals.events_committed` fires on the writer's thread after each commit that stored
events, and `artifacts.signals.access_changed` after each commit that changed who can read what
(member and channel events, and operators' edits, which store no event). The receivers here
turn each into ONE channel-layer message for the community's group (coarse groups; each relay
process's hub matches filters locally; under load the publisher merges consecutive event-only
messages of a group into one, `_Publisher`), carrying:

- `events`: the stored 45010 revisions, 45011 markers and 9005 redactions, with the fields
  matching needs
  parsed once here instead of once per subscriber;
- `access`: channels whose readability changed, or `"*"` for the whole community; hubs
  re-check their subscribers at once;
- `changes`: what each of those channel changes was (`artifacts.signals.AccessChange`, with the
  stored 9000/9001/9002/9008 that made it), so each subscriber whose own access it concerns
  hears it (PROTOCOL.md section 8);
- `seq`: the group's next sequence number (Redis INCR, shared by every instance), so a hub that
  misses a message notices the gap and tells its subscribers to run an HTTP round;
- `lost`: set when an earlier publish of this process to the group failed before it had a
  sequence number (Redis down): a loss no gap could show;
- `t`: the publisher's clock when it published, so an overloaded hub can tell a backlog.

`LiveMessage` is that message, typed; its `to_layer`/`from_layer` are the one place that spells
the channel layer's keys (kept short and stable: instances of two versions share the groups
during a rolling restart).

Publishing never raises into the writer: the write is committed whatever happens here.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from artifacts.signals import AccessChange, StoredEvent
from artifacts.ws.filters import LiveEvent
from nostr.events import first_tag
from nostr.kinds import KIND_ARTIFACT, KIND_REDACTION, KIND_REMOVAL_MARKER, SYNC_KINDS

__all__ = [
    "EVERY_CHANNEL",
    "LiveChange",
    "LiveMessage",
    "announce_access_change",
    "commit_message",
    "community_group",
    "current_sequence",
    "finish_publishing",
    "next_sequence",
    "on_access_changed",
    "on_events_committed",
    "publishing_finished_at_shutdown",
]

logger = logging.getLogger(__name__)

EVERY_CHANNEL = "*"
MESSAGE_TYPE = "sync.commit"  # dispatched by the hub, never by a consumer

# Seconds a publish may take before the writer's thread gives up on it (Redis unreachable).
PUBLISH_TIMEOUT = 1.0

_local_sequences: dict[str, int] = {}
_local_lock = threading.Lock()
_lost_groups: set[str] = set()


def _namespace() -> str:
    """Distinguishes deployments sharing one Redis server.

    Redis pub/sub ignores the database number, so two deployments on one server (or two test
    runs) would hear each other's groups. Everything in the digest is identical on every
    instance of one deployment.
    """
    db = settings.DATABASES.get("default", {})
    material = "|".join(
        str(part)
        for part in (
            settings.RELAY_PUBKEY,
            db.get("NAME"),
            db.get("HOST"),
            db.get("PORT"),
            settings.CONFIG.redis_url,
        )
    )
    return hashlib.sha256(material.encode()).hexdigest()[:12]


def community_group(community_id: int) -> str:
    return f"buzzsync.{_namespace()}.c{community_id}"


@dataclass(slots=True)
class LiveMessage:
    """One commit's announcement to a community's group (see the module docstring)."""

    community_id: int
    events: list[LiveEvent] = field(default_factory=list)
    access: list[str] = field(default_factory=list)  # channel ids, or [EVERY_CHANNEL]
    changes: list[LiveChange] = field(default_factory=list)
    seq: int = 0  # set by the publisher thread, in publishing order
    lost: bool = False
    sent_at: float = 0.0  # the publisher's time.time()

    def to_layer(self) -> dict[str, Any]:
        """The channel layer's form: plain values its serializer (msgpack) carries."""
        return {
            "type": MESSAGE_TYPE,
            "c": self.community_id,
            "seq": self.seq,
            "lost": self.lost,
            "t": self.sent_at,
            "events": [_event_to_layer(e) for e in self.events],
            "access": self.access,
            "changes": [
                {"h": c.channel_id, "what": c.what, "p": c.pubkey,
                 "event": _event_to_layer(c.event) if c.event is not None else None}
                for c in self.changes
            ],
        }

    @classmethod
    def from_layer(cls, message: dict[str, Any]) -> LiveMessage | None:
        """The message a hub received, or None for another type of message."""
        if message.get("type") != MESSAGE_TYPE:
            return None
        return cls(
            community_id=int(message["c"]),
            seq=int(message["seq"]),
            lost=bool(message.get("lost")),
            sent_at=float(message.get("t", 0) or 0.0),
            access=list(message.get("access") or []),
            events=[_event_from_layer(entry) for entry in message.get("events") or []],
            # Absent from an instance of an older version (a rolling restart): no hints.
            changes=[
                LiveChange(
                    channel_id=entry["h"],
                    what=entry["what"],
                    pubkey=entry.get("p"),
                    event=_event_from_layer(entry["event"]) if entry.get("event") else None,
                )
                for entry in message.get("changes") or []
            ],
        )


@dataclass(frozen=True, slots=True)
class LiveChange:
    """An access change as the hubs get it (`artifacts.signals.AccessChange`, its event in the
    form matching needs)."""

    channel_id: str
    what: str
    pubkey: str | None = None
    event: LiveEvent | None = None


def _event_to_layer(e: LiveEvent) -> dict[str, Any]:
    return {"id": e.id, "pubkey": e.pubkey, "kind": e.kind, "created_at": e.created_at,
            "h": e.channel_id, "d": e.artifact_id, "type": e.artifact_type, "raw": e.raw}


def _event_from_layer(entry: dict[str, Any]) -> LiveEvent:
    return LiveEvent(
        id=entry["id"],
        pubkey=entry["pubkey"],
        kind=int(entry["kind"]),
        created_at=int(entry["created_at"]),
        channel_id=entry["h"],
        artifact_id=entry["d"],
        artifact_type=entry.get("type"),
        raw=entry["raw"],
    )


class FanOutUnavailable(Exception):
    """Redis is configured but down (or was within the last seconds): nothing can be published
    to the other instances. (Not `relaycore.redis_clients.RedisUnavailable`, which tells an async
    caller to take the synchronous path and its fallbacks.)"""


def _redis() -> Any | None:
    """The shared Redis client, or None without Redis (the in-memory layer of one process).

    Uses the rate limiter's circuit breaker: while Redis is known to be down, callers do not
    each wait for a connect timeout.
    """
    if not settings.CONFIG.redis_url:
        return None
    from relaycore.redis_clients import redis_client

    client = redis_client()
    if client is None:
        raise FanOutUnavailable("Redis is unavailable")
    return client


async def next_sequence(group: str) -> int:
    """The group's next sequence number: Redis INCR (fleet-wide), on the publishing loop's
    client, or a process counter without Redis."""
    if settings.CONFIG.redis_url:
        from relaycore.redis_clients import RedisUnavailable, mark_redis_down, pipelined_redis
        from relaycore.redis_pipe import pack_command

        try:
            # The loop's lean connection (`relaycore.redis_pipe`): with two-write batches (two
            # workers, four connections each) every batch is a publish, and its INCR and PUBLISH
            # through redis-py were 15-25% of a write's relay CPU (docs/performance.md, "WebSocket
            # EVENT at two workers each"). The PUBLISH stays with the channel layer.
            client = pipelined_redis()
        except RedisUnavailable:
            raise FanOutUnavailable("Redis is unavailable") from None
        try:
            # Bounded like the PUBLISH; a timeout (Redis unreachable) opens the breaker too.
            async with asyncio.timeout(PUBLISH_TIMEOUT):
                reply = await client.execute(pack_command(b"INCR", f"{group}:seq"))
            if isinstance(reply, int):
                return reply
            raise FanOutUnavailable(f"INCR {group}:seq answered {reply!r}")
        except TimeoutError:
            mark_redis_down()
            raise FanOutUnavailable(f"Redis did not answer within {PUBLISH_TIMEOUT:g} s") from None
        except Exception:
            mark_redis_down()
            raise
    with _local_lock:
        _local_sequences[group] = _local_sequences.get(group, 0) + 1
        return _local_sequences[group]


def current_sequence(group: str) -> int:
    """The last sequence number handed out for `group` (0 before the first)."""
    client = _redis()
    if client is not None:
        value = client.get(f"{group}:seq")
        return int(value) if value is not None else 0
    with _local_lock:
        return _local_sequences.get(group, 0)


def _event_entry(item: StoredEvent, types: dict[str, str]) -> LiveEvent | None:
    """The live form of a stored event; a redaction or channel event has no `d` (""), so a
    filter naming `#d` never matches it."""
    event = item.event
    artifact_id = first_tag(event, "d") if event.kind in SYNC_KINDS else ""
    channel_id = item.channel_id or first_tag(event, "h")
    if artifact_id is None or channel_id is None:
        return None
    return LiveEvent(
        id=event.id,
        pubkey=event.pubkey,
        kind=event.kind,
        created_at=event.created_at,
        channel_id=channel_id,
        artifact_id=artifact_id,
        artifact_type=types.get(artifact_id),
        raw=event.raw,
    )


def commit_message(community_id: int, events: list[StoredEvent]) -> list[LiveEvent]:
    """The live entries of one committed transaction's events (its 45010s, 45011s and 9005s;
    channel and member events reach subscribers as access changes, `on_access_changed`)."""
    # A marker carries no type; its artifact's type (immutable) is on the move revision the
    # same transaction stored, else on the artifact's head.
    types: dict[str, str] = {}
    for item in events:
        if item.event.kind == KIND_ARTIFACT:
            d, artifact_type = first_tag(item.event, "d"), first_tag(item.event, "type")
            if d is not None and artifact_type is not None:
                types[d] = artifact_type
    live: list[LiveEvent] = []
    for item in events:
        kind = item.event.kind
        if kind in (KIND_ARTIFACT, KIND_REMOVAL_MARKER, KIND_REDACTION):
            if kind == KIND_REMOVAL_MARKER:
                _fill_marker_type(community_id, item, types)
            entry = _event_entry(item, types)
            if entry is not None:
                live.append(entry)
    return live


def _fill_marker_type(community_id: int, item: StoredEvent, types: dict[str, str]) -> None:
    d = first_tag(item.event, "d")
    if d is None or d in types:
        return
    from artifacts.models import ArtifactHead

    found = (
        ArtifactHead.objects.filter(community_id=community_id, artifact_id=d)
        .values_list("artifact_type", flat=True)
        .first()
    )
    if found is not None:
        types[d] = found


def on_events_committed(
    sender: object, *, community_id: int, events: list[StoredEvent], **kwargs: Any
) -> None:
    """Receiver of `events_committed` (connected in artifacts.apps)."""
    try:
        live = commit_message(community_id, events)
    except Exception:  # a receiver must not raise into the writer
        logger.exception("cannot build the live message of a commit")
        _lost_groups.add(community_group(community_id))
        return
    if live:
        _publish(community_id, live, [])


def on_access_changed(
    sender: object,
    *,
    community_id: int,
    channel_ids: list[str] | None,
    changes: list[AccessChange] | None = None,
    **kwargs: Any,
) -> None:
    """Receiver of `access_changed` (connected in artifacts.apps)."""
    announce_access_change(community_id=community_id, channel_ids=channel_ids, changes=changes)


def announce_access_change(
    *,
    community_id: int,
    channel_ids: Collection[str] | None,
    changes: Collection[AccessChange] | None = None,
) -> None:
    """Tell every instance's subscribers to re-check access now (call after the commit).

    `channel_ids` names the channels whose readability may have changed, `None` the whole
    community (policy changes). The write services do this through `access_changed`; code that
    changes readability outside them (a manual fix) can call it directly.
    """
    access = [EVERY_CHANNEL] if channel_ids is None else [str(c) for c in channel_ids]
    try:
        live_changes = [_live_change(change) for change in changes or ()]
    except Exception:  # never into the writer; the access message still goes out
        logger.exception("cannot build the access changes of a commit")
        live_changes = []
    _publish(community_id, [], access, live_changes)


def _live_change(change: AccessChange) -> LiveChange:
    event = None
    if change.event is not None:
        event = _event_entry(StoredEvent(change.event, change.channel_id), {})
    return LiveChange(change.channel_id, change.what, change.pubkey, event)


def _publish(
    community_id: int,
    live: list[LiveEvent],
    access: list[str],
    changes: list[LiveChange] | None = None,
) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    group = community_group(community_id)
    message = LiveMessage(
        community_id, events=live, access=access, changes=changes or [], sent_at=time.time()
    )
    loop = _running_loop()
    try:
        if settings.CONFIG.redis_url or loop is not None:
            _publisher(loop).submit(layer, group, message)
        else:
            # The in-memory layer's queues belong to the serving loop: from a database thread,
            # async_to_sync publishes on the loop of the request or connection.
            async_to_sync(_send)(layer, group, message)
    except Exception as exc:  # never into the writer: its write is committed
        logger.warning("live fan-out: publish to %s failed (%s)", group, exc)


async def _send(layer: Any, group: str, message: LiveMessage) -> None:
    try:
        message.seq = await next_sequence(group)
    except Exception as exc:
        # Without a sequence number the hubs cannot see this loss: flag the group so the next
        # message that gets through tells them.
        logger.warning("live fan-out: no sequence number for %s (%s)", group, exc)
        _lost_groups.add(group)
        return
    # Set here, in publishing order: a loss recorded by an earlier publish is announced.
    message.lost = group in _lost_groups
    try:
        await asyncio.wait_for(layer.group_send(group, message.to_layer()), PUBLISH_TIMEOUT)
    except Exception as exc:
        # The sequence number was taken, so hubs see the gap.
        logger.warning("live fan-out: publish to %s failed (%s)", group, exc)
        return
    _lost_groups.discard(group)


# At most this many commits' events ride in one merged message (a hub handles a message's
# events in one go; a backlog is sent in several).
MAX_MERGED_EVENTS = 200


class _Publisher:
    """Numbers and publishes on one event loop, in submission order.

    Submissions queue up, and one drain on the loop takes everything queued at once: each run of
    consecutive event-only messages to one group is merged into one message (its events in
    commit order: a hub delivers them exactly as it would the separate messages', and messages
    with access changes are never merged, since hubs apply those first), then the messages are
    numbered and published one at a time. Under load a publish so carries several commits, one
    INCR and one PUBLISH for all of them. Measured (bench/peer.py, 10,000 creates at 265-420
    writes/s, no subscriber): with a task per commit, each starting with a blocking INCR, the
    tasks backed up until their 1 s publish timeouts fired by the thousand (1,758 lost messages
    in one run), each a gap every hub had to report to its subscribers.

    A write committed on the server loop (`async_ingest`) is published by that loop's
    publisher: no hop to another thread and back (measured in docs/performance.md). A write
    committed on a database thread goes to the process's publisher thread, a daemon running a
    loop of its own, so the writer never waits for Redis. Both number from the one counter;
    hubs account for numbers overtaking each other (`sequence`), as between instances.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Weakly: `_loop_publishers` is keyed by the loop, which this entry must not keep alive
        # (the publisher thread's loop is kept by its thread).
        self._loop = weakref.ref(loop)
        self._drain_task: asyncio.Task[None] | None = None  # held: a loop holds tasks weakly
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)
        self.queue: list[tuple[Any, str, LiveMessage]] = []
        self.draining = False

    @classmethod
    def on_thread(cls) -> _Publisher:
        """A publisher with a daemon thread of its own running its loop."""
        loop = asyncio.new_event_loop()
        publisher = cls(loop)
        thread = threading.Thread(target=loop.run_forever, name="buzz-live-publish")
        thread.daemon = True
        thread.start()
        atexit.register(publisher.flush)
        return publisher

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop()
        if loop is None:
            raise RuntimeError("the publisher's event loop is gone")
        return loop

    def submit(self, layer: Any, group: str, message: LiveMessage) -> None:
        with self.lock:
            self.queue.append((layer, group, message))
            if self.draining:
                return  # the running drain takes it
            self.draining = True
        if _running_loop() is self.loop:
            self._start_drain()
        else:
            self.loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self._drain_task = self.loop.create_task(self._drain())

    async def finished(self, timeout: float) -> None:
        """Wait, on this publisher's loop, for what was submitted to go out."""
        if self._drain_task is not None and not self._drain_task.done():
            await asyncio.wait([self._drain_task], timeout=timeout)

    async def _drain(self) -> None:
        while True:
            with self.lock:
                batch, self.queue = self.queue, []
                if not batch:
                    self.draining = False
                    self.idle.notify_all()
                    return
            for layer, group, message in merged(batch):
                try:
                    await _send(layer, group, message)
                except Exception:  # _send logs its own failures; nothing may stop the drain
                    logger.exception("live fan-out: publish to %s failed", group)

    def flush(self, timeout: float = 2.0) -> None:
        """Wait for what was submitted (process exit: a command's last writes still go out).
        From another thread than the loop's."""
        with self.lock:
            self.idle.wait_for(lambda: not self.draining, timeout=timeout)


async def finish_publishing(timeout: float = 2.0) -> None:
    """Wait for this loop's publisher to send what was submitted (the server's shutdown: the
    commits its last writes announced still go out)."""
    publisher = _loop_publishers.get(asyncio.get_running_loop())
    if publisher is not None:
        await publisher.finished(timeout)


def publishing_finished_at_shutdown(app: Any) -> Any:
    """ASGI: the lifespan's shutdown reaches `app` only once this loop's publisher is done."""

    async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return

        async def receive_after_publishing() -> dict[str, Any]:
            message: dict[str, Any] = await receive()
            if message["type"] == "lifespan.shutdown":
                await finish_publishing()
            return message

        await app(scope, receive_after_publishing, send)

    return application


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def merged(batch: list[tuple[Any, str, LiveMessage]]) -> list[tuple[Any, str, LiveMessage]]:
    """`batch` with each run of consecutive event-only messages to one group (on one layer)
    merged into one message of their events in order, up to MAX_MERGED_EVENTS; the merged
    message keeps the oldest submission time, so a hub's backlog check stays as strict."""
    out: list[tuple[Any, str, LiveMessage]] = []
    for layer, group, message in batch:
        if out and not message.access:
            last_layer, last_group, last = out[-1]
            if (last_layer is layer and last_group == group and not last.access
                    and len(last.events) + len(message.events) <= MAX_MERGED_EVENTS):
                out[-1] = (layer, group, LiveMessage(
                    last.community_id, events=[*last.events, *message.events],
                    sent_at=min(last.sent_at, message.sent_at)))
                continue
        out.append((layer, group, message))
    return out


_thread_publisher: _Publisher | None = None
_thread_publisher_pid = 0
_loop_publishers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Publisher] = (
    weakref.WeakKeyDictionary()
)


def _publisher(loop: asyncio.AbstractEventLoop | None) -> _Publisher:
    """The publisher of `loop`, the running one (a write committed on the server loop), or
    without one the process's publisher thread's (a database thread's write)."""
    global _thread_publisher, _thread_publisher_pid
    if loop is not None:
        publisher = _loop_publishers.get(loop)
        if publisher is None:
            publisher = _loop_publishers[loop] = _Publisher(loop)
        return publisher
    with _local_lock:
        # A forked worker inherits the object but not the thread: start its own.
        if _thread_publisher is None or _thread_publisher_pid != os.getpid():
            _thread_publisher = _Publisher.on_thread()
            _thread_publisher_pid = os.getpid()
        return _thread_publisher
