"""Every read path agrees with the one statement of readability (artifacts.selectors.readability).

Random worlds are built through the real services: channels open or private, live, archived or
deleted; readers active members, removed members or strangers; artifacts of two types created,
updated, moved, deleted or with a redacted head (or an older revision redacted); the policy on or
off, with or without a type list. The expectation is computed from what the test did, with the
Python functions of `readability`, and every read path must agree with it for every reader:

- plain reads (current heads) and history (revisions, `#d`);
- a full round, and a continuation round after the world changed under a finished round;
- the readable-channel SELECT the view digest is built from (one reader, and any of several);
- the WebSocket replay (heads with tombstones, removal markers) for a connection's pubkeys;
- the live stream's channel states and policy, and live delivery itself (the publisher's
  message, the hub's and the consumer's checks) for a connection's pubkeys.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, cast

import orjson
import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from artifacts.models import Event
from artifacts.selectors.filters import parse_filter
from artifacts.selectors.plain_reads import plain_query
from artifacts.selectors.readability import (
    ANY_READER,
    channel_is_readable,
    head_is_readable,
    policy_allows_type,
    readable_channels,
    revision_is_readable,
)
from artifacts.selectors.replay import channel_states, community_policy, replay_events
from artifacts.services.channels import channel_archive, channel_delete
from artifacts.services.communities import community_update_policy
from artifacts.services.members import member_remove
from artifacts.signals import StoredEvent
from artifacts.ws.consumer import Subscription, SyncConsumer
from artifacts.ws.filters import parse_req_filter as parse_ws_filter
from artifacts.ws.hub import SyncHub
from artifacts.ws.outbox import Outbox
from artifacts.ws.publish import commit_message
from nostr.events import served_event
from nostr.kinds import SYNC_KINDS
from tests.artifacts.selectors.replica import Replica, tag
from tests.factories import (
    Key,
    add_member,
    create_artifact,
    delete_artifact,
    make_channel,
    make_community,
    make_key,
    move_artifact,
    redact,
    update_artifact,
)

pytestmark = pytest.mark.django_db(transaction=True)

TYPES = ("buzz.task", "buzz.note")
OWNER = make_key()
READERS = [make_key() for _ in range(3)]
N_CHANNELS = 4

channel_plans = st.lists(
    st.tuples(st.sampled_from(["open", "private"]), st.sampled_from(["live", "archived",
                                                                     "deleted"])),
    min_size=N_CHANNELS, max_size=N_CHANNELS,
)
# Per (channel, reader): no membership, an active one, or one that was removed.
membership_plans = st.lists(
    st.sampled_from(["none", "active", "removed"]),
    min_size=N_CHANNELS * len(READERS), max_size=N_CHANNELS * len(READERS),
)
artifact_plans = st.lists(
    st.fixed_dictionaries({
        "home": st.integers(0, N_CHANNELS - 1),
        "type": st.sampled_from(TYPES),
        "update": st.booleans(),
        "move_to": st.none() | st.integers(0, N_CHANNELS - 1),
        # What happens after the first round: nothing, a delete, a redaction of the head, a
        # redaction of the first revision (the head stays readable), or a move.
        "later": st.sampled_from(["none", "delete", "redact_head", "redact_first", "move"]),
    }),
    max_size=6,
)
policy_plans = st.tuples(
    st.booleans(), st.none() | st.lists(st.sampled_from(TYPES), min_size=1, unique=True)
)


@dataclass
class Revision:
    event_id: str
    channel: int
    redacted: bool = False


@dataclass
class Artifact:
    d: str
    type: str
    home: int
    revisions: list[Revision] = field(default_factory=list)
    deleted: bool = False

    @property
    def head(self) -> Revision:
        return self.revisions[-1]


@dataclass
class World:
    community: Any
    channels: list[str]
    visibility: list[str]
    state: list[str]
    members: set[tuple[int, str]]  # (channel index, pubkey) of active memberships
    artifacts: list[Artifact]
    enabled: bool = True
    types: list[str] | None = None

    # --- the expectation, from the one Python statement of the rule ----------------------

    def channel_ok(self, index: int, readers: list[str]) -> bool:
        return channel_is_readable(
            exists=self.state[index] != "deleted",
            open=self.visibility[index] == "open",
            member=any((index, p) in self.members for p in readers),
        )

    def policy_ok(self, artifact_type: str) -> bool:
        return policy_allows_type(artifact_type, enabled=self.enabled, allowed_types=self.types)

    def readable_heads(self, readers: list[str], *, channels: list[int] | None = None,
                       types: list[str] | None = None) -> dict[str, str]:
        return {
            a.d: a.head.event_id
            for a in self.artifacts
            if head_is_readable(
                policy_allows=self.policy_ok(a.type),
                channel_readable=self.channel_ok(a.home, readers),
                deleted=a.deleted,
                redacted=a.head.redacted,
            )
            and (channels is None or a.home in channels)
            and (types is None or a.type in types)
        }

    def readable_revisions(self, reader: str) -> set[str]:
        return {
            r.event_id
            for a in self.artifacts
            for r in a.revisions
            if revision_is_readable(
                policy_allows=self.policy_ok(a.type),
                channel_readable=self.channel_ok(r.channel, [reader]),
                redacted=r.redacted,
            )
        }


def _build(channel_plan: list[tuple[str, str]], membership_plan: list[str],
           artifact_plan: list[dict[str, Any]]) -> World:
    community = make_community(host=f"r{uuid.uuid4().hex[:16]}.example")
    visibility = [v for v, _ in channel_plan]
    channels = [make_channel(community, owner=OWNER, visibility=v) for v in visibility]
    # The creator owns every channel: an active member of each.
    owner = {(i, OWNER.pubkey) for i in range(N_CHANNELS)}
    world = World(community, channels, visibility, ["live"] * N_CHANNELS, owner, [])
    for index, standing in enumerate(membership_plan):
        channel, reader = divmod(index, len(READERS))
        if standing != "none":
            add_member(community, channels[channel], READERS[reader])
            world.members.add((channel, READERS[reader].pubkey))
    for plan in artifact_plan:
        d, head = create_artifact(community, OWNER, channels[plan["home"]], type=plan["type"])
        artifact = Artifact(d, plan["type"], plan["home"], [Revision(head, plan["home"])])
        if plan["update"]:
            _update(world, artifact)
        if plan["move_to"] is not None and plan["move_to"] != artifact.home:
            _move(world, artifact, plan["move_to"])
        world.artifacts.append(artifact)
    return world


def _update(world: World, a: Artifact) -> None:
    head = update_artifact(world.community, OWNER, a.d, world.channels[a.home],
                           prev=a.head.event_id, type=a.type)
    a.revisions.append(Revision(head, a.home))


def _move(world: World, a: Artifact, to: int) -> None:
    head = move_artifact(world.community, OWNER, a.d, world.channels[to],
                         prev=a.head.event_id, type=a.type)
    a.home = to
    a.revisions.append(Revision(head, to))


def _change(world: World, artifact_plan: list[dict[str, Any]],
            channel_plan: list[tuple[str, str]], membership_plan: list[str],
            policy: tuple[bool, list[str] | None]) -> None:
    """The writes after the first round: artifact ops, then removals, channel states, policy."""
    for a, plan in zip(world.artifacts, artifact_plan, strict=True):
        later = plan["later"]
        if later == "delete":
            head = delete_artifact(world.community, OWNER, a.d, world.channels[a.home],
                                   prev=a.head.event_id, type=a.type)
            a.revisions.append(Revision(head, a.home))
            a.deleted = True
        elif later == "redact_head":
            redact(world.community, OWNER, world.channels[a.head.channel], a.head.event_id)
            a.head.redacted = True
        elif later == "redact_first" and len(a.revisions) > 1:
            first = a.revisions[0]
            redact(world.community, OWNER, world.channels[first.channel], first.event_id)
            first.redacted = True
        elif later == "move":
            _move(world, a, (a.home + 1) % N_CHANNELS)
    for index, standing in enumerate(membership_plan):
        channel, reader = divmod(index, len(READERS))
        if standing == "removed":
            member_remove(community_id=world.community.pk,
                          channel_id=uuid.UUID(world.channels[channel]),
                          pubkey=READERS[reader].pubkey)
            world.members.discard((channel, READERS[reader].pubkey))
    for index, (_, state) in enumerate(channel_plan):
        channel_id = uuid.UUID(world.channels[index])
        if state == "archived":
            channel_archive(community_id=world.community.pk, channel_id=channel_id)
        elif state == "deleted":
            channel_delete(community_id=world.community.pk, channel_id=channel_id)
        world.state[index] = state
    enabled, types = policy
    community_update_policy(community_id=world.community.pk, artifacts_enabled=enabled,
                            artifact_types=types)
    world.enabled, world.types = enabled, types


def _plain(world: World, reader: str, raw_filter: dict[str, Any]) -> set[str]:
    rows = plain_query(community_id=world.community.pk, reader=reader,
                       query=parse_filter({**raw_filter, "limit": 1000}))
    return {orjson.loads(raw)["id"] for raw in rows}


def _channel_select(world: World, readers: str, params: dict[str, Any]) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT channel_id::text FROM ({readable_channels(readers=readers)}) v",
            {"community": world.community.pk, **params},
        )
        return {row[0] for row in cursor}


class _Frames:
    """Stands in for a connection's outbox: records the live frames queued."""

    def __init__(self) -> None:
        self.frames: list[str] = []

    def put_live(self, frame: str) -> None:
        self.frames.append(frame)


def _live_delivered(world: World, pubkeys: list[str], rows: list[Event]) -> set[str]:
    """The ids the live stream delivers to a connection of `pubkeys` subscribed to everything:
    the publisher's message built from the stored events (`commit_message`), then the hub's and
    the consumer's checks (`SyncHub._deliver`, `SyncConsumer.deliver`)."""
    stored = [
        StoredEvent(event=served_event(orjson.loads(row.raw)), channel_id=str(row.channel_id))
        for row in rows
    ]
    live = commit_message(world.community.pk, stored)
    consumer = SyncConsumer()
    consumer.closing = False
    consumer.community_id = world.community.pk
    consumer.pubkeys = set(pubkeys)
    sub = Subscription.create("all", (parse_ws_filter({}, max_limit=1000),))
    sub.pending = None  # replay done: frames go straight to the outbox
    consumer.subs = {"all": sub}
    frames = _Frames()
    consumer.outbox = cast(Outbox, frames)
    hub = SyncHub()
    hub._clients[world.community.pk] = {consumer}
    async_to_sync(hub._deliver)(world.community.pk, live)
    return {orjson.loads(frame)[2]["id"] for frame in frames.frames}


def _check_every_path(world: World, replicas: dict[str, Replica]) -> None:
    ds = [a.d for a in world.artifacts]
    for key in [OWNER, *READERS]:
        p = key.pubkey
        expected = world.readable_heads([p])
        assert {
            tag(orjson.loads(raw), "d") for raw in plain_query(
                community_id=world.community.pk, reader=p,
                query=parse_filter({"artifact": "current", "limit": 1000}))
        } == set(expected)
        assert _plain(world, p, {"artifact": "current"}) == set(expected.values())
        if ds:
            assert _plain(world, p, {"artifact": "history", "#d": ds}) == (
                world.readable_revisions(p))
        assert Replica(world.community, p).fresh() == expected
        assert replicas[p].round() and replicas[p].heads() == expected
        assert _channel_select(world, "= %(reader)s", {"reader": p}) == {
            world.channels[i] for i in range(N_CHANNELS) if world.channel_ok(i, [p])
        }

    # A WebSocket connection holding several pubkeys reads what any of them may read.
    markers = list(Event.objects.filter(community=world.community, kind=45011))
    stored = list(
        Event.objects.filter(community=world.community, kind__in=SYNC_KINDS).order_by("id")
    )
    states = channel_states(community_id=world.community.pk, channel_ids=world.channels)
    policy = community_policy(community_id=world.community.pk)
    types = {a.d: a.type for a in world.artifacts}
    for pubkeys in ([READERS[0].pubkey], [READERS[1].pubkey, READERS[2].pubkey],
                    [k.pubkey for k in READERS]):
        readable = {world.channels[i] for i in range(N_CHANNELS) if world.channel_ok(i, pubkeys)}
        assert _channel_select(world, ANY_READER, {"pubkeys": pubkeys}) == readable
        for i, channel in enumerate(world.channels):
            assert states[channel].readable_by_any(pubkeys) == world.channel_ok(i, pubkeys)
        # Replay: current heads, delete tombstones included, never a redacted head; and the
        # removal markers stored in readable channels.
        heads = {
            a.head.event_id for a in world.artifacts
            if world.policy_ok(a.type) and world.channel_ok(a.home, pubkeys)
            and not a.head.redacted
        }
        marker_ids = {
            m.event_id for m in markers
            if str(m.channel_id) in readable
            and world.policy_ok(types[tag(orjson.loads(m.raw), "d") or ""])
        }
        got = replay_events(community_id=world.community.pk, pubkeys=pubkeys,
                            kinds=[45010, 45011], limit=1000)
        assert {event_id for _, event_id, _ in got} == heads | marker_ids
        # Live delivery: every stored 45010 and 45011, announced as if it had just committed
        # (a later redaction is not the live stream's business), reaches the connection when
        # the policy allows its artifact's type and its channel is readable now.
        live_expected = {
            row.event_id for row in stored
            if world.channel_ok(world.channels.index(str(row.channel_id)), pubkeys)
            and world.policy_ok(types[tag(orjson.loads(row.raw), "d") or ""])
        }
        assert _live_delivered(world, pubkeys, stored) == live_expected
    for artifact_type in TYPES:
        assert policy.allows(artifact_type) == world.policy_ok(artifact_type)


@settings(max_examples=20, suppress_health_check=[HealthCheck.too_slow])
@given(channel_plan=channel_plans, membership_plan=membership_plans,
       artifact_plan=artifact_plans, policy=policy_plans, filtered=st.data())
def test_every_read_path_agrees_with_the_readability_model(
    channel_plan: list[tuple[str, str]], membership_plan: list[str],
    artifact_plan: list[dict[str, Any]], policy: tuple[bool, list[str] | None],
    filtered: st.DataObject,
) -> None:
    world = _build(channel_plan, membership_plan, artifact_plan)
    readers: list[Key] = [OWNER, *READERS]
    replicas = {k.pubkey: Replica(world.community, k.pubkey) for k in readers}
    # A filtered reader (`#h` and `#type`), kept by rounds across the change too.
    wanted_channels = filtered.draw(st.lists(st.integers(0, N_CHANNELS - 1), min_size=1,
                                             unique=True))
    wanted_types = filtered.draw(st.lists(st.sampled_from(TYPES), min_size=1, unique=True))
    narrow = Replica(world.community, READERS[0].pubkey,
                     channels=[world.channels[i] for i in wanted_channels], types=wanted_types)
    _check_every_path(world, replicas)
    narrow.round()
    assert narrow.heads() == world.readable_heads(
        [READERS[0].pubkey], channels=wanted_channels, types=wanted_types)

    # Continuation rounds (or the resets a view change causes) after writes of every kind.
    _change(world, artifact_plan, channel_plan, membership_plan, policy)
    _check_every_path(world, replicas)
    narrow.round()
    assert narrow.heads() == world.readable_heads(
        [READERS[0].pubkey], channels=wanted_channels, types=wanted_types)
