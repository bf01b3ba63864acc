"""PROTOCOL.md section 2, stamp table: one test per row, exactly the listed stamps move.

Every stamp column of the community is snapshotted before and after one change. Stamps of rows
that existed must move exactly as the row says (and nothing else may move); rows the change
inserts are listed separately. Each moved stamp must come from the database clock, inside the
writing statement: between two `clock_timestamp()` reads taken around the change.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from django.db import connection

from artifacts.models import ArtifactHead, ArtifactRevision, ChannelMember, Community
from artifacts.services import channels as channel_services
from artifacts.services.communities import community_update_policy
from tests.factories import (
    Key,
    add_member,
    artifact_tags,
    make_channel,
    make_community,
    make_key,
    write,
)

Key_ = tuple[Any, ...]


def snapshot(community: Community) -> dict[Key_, Any]:
    state: dict[Key_, Any] = {}
    for artifact_id, stamp in ArtifactHead.objects.filter(community=community).values_list(
        "artifact_id", "modified_at"
    ):
        state[("head", str(artifact_id))] = stamp
    for event_id, stamp, source in ArtifactRevision.objects.filter(
        community=community
    ).values_list("event_id", "modified_at", "source_channel_id"):
        state[("revision", event_id)] = stamp
        state[("revision source", event_id)] = source
    for channel_id, pubkey, stamp in ChannelMember.objects.filter(community=community).values_list(
        "channel_id", "pubkey", "sync_modified_at"
    ):
        state[("member", str(channel_id), pubkey)] = stamp
    row = Community.objects.filter(pk=community.pk).values_list(
        "artifact_policy_modified_at", "listing_version"
    ).get()
    state[("policy stamp",)] = row[0]
    state[("listing version",)] = row[1]
    return state


def _db_clock() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        row = cursor.fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


@dataclass
class World:
    community: Community
    owner: Key
    member: Key
    outsider: Key
    open: str
    private: str
    d: str
    first: str  # create of d
    head: str  # update of d, the head
    _clock: itertools.count[int]

    def write(self, who: Key, kind: int, tags: list[list[str]], content: str = "") -> str:
        # A distinct created_at per event: identical tags must not make identical events.
        result = write(self.community, who, kind, tags, content,
                       created_at=int(time.time()) - next(self._clock))
        return result.event_id

    def artifact(self, op: str, h: str, prev: str | None, d: str | None = None) -> str:
        content = "" if op == "delete" else "{}"
        return self.write(self.owner, 45010,
                          artifact_tags(op=op, d=d or self.d, h=h, prev=prev), content)


@pytest.fixture
def world(db: None) -> World:
    owner, member, outsider = make_key(), make_key(), make_key()
    community = make_community(admins=[owner])
    open_channel = make_channel(community, owner=owner)
    private = make_channel(community, visibility="private", owner=owner, members=[member])
    w = World(community, owner, member, outsider, open_channel, private, str(uuid.uuid4()),
              "", "", itertools.count(1))
    w.first = w.artifact("create", open_channel, None)
    w.head = w.artifact("update", open_channel, w.first)
    return w


@dataclass(frozen=True)
class Row:
    name: str
    action: Callable[[World], Any]
    moved: Callable[[World], set[Key_]]  # stamps of existing rows that must move
    setup: Callable[[World], Any] = lambda w: None


def _new_d(w: World) -> str:
    return w.artifact("create", w.open, None, d=str(uuid.uuid4()))


def _remove_member(w: World) -> None:
    w.write(w.owner, 9001, [["h", w.private], ["p", w.member.pubkey]])


def _op(op: str, target: str = "open") -> Callable[[World], str]:
    def run(w: World) -> str:
        return w.artifact(op, getattr(w, target), w.head)

    return run


def _delete_head(w: World) -> None:
    w.head = w.artifact("delete", w.open, w.head)


def _channel(name: str) -> Callable[[World], Any]:
    def run(w: World) -> Any:
        return getattr(channel_services, name)(
            community_id=w.community.pk, channel_id=uuid.UUID(w.open)
        )

    return run


def _policy(**change: Any) -> Callable[[World], Any]:
    def run(w: World) -> Any:
        return community_update_policy(community_id=w.community.pk, **change)

    return run


HEAD = lambda w: {("head", w.d)}  # noqa: E731
MEMBER = lambda w: {("member", w.private, w.member.pubkey)}  # noqa: E731
LISTING = lambda w: {("policy stamp",), ("listing version",)}  # noqa: E731
NOTHING: Callable[[World], set[Key_]] = lambda w: set()  # noqa: E731

ROWS = [
    # head created, updated, deleted, restored, moved, or its head event redacted
    Row("head created", _new_d, NOTHING),
    Row("head updated", _op("update"), HEAD),
    Row("head deleted", _op("delete"), HEAD),
    Row("head restored", _op("restore"), HEAD, setup=_delete_head),
    Row("head moved", _op("move", "private"), HEAD),
    Row("head event redacted",
        lambda w: w.write(w.owner, 9005, [["h", w.open], ["e", w.head]]),
        lambda w: {("head", w.d), ("revision", w.head)}),
    # redaction of any revision
    Row("older revision redacted",
        lambda w: w.write(w.owner, 9005, [["h", w.open], ["e", w.first]]),
        lambda w: {("revision", w.first)}),
    # grant, rejoin, removal, role change
    Row("grant", lambda w: add_member(w.community, w.private, w.outsider), NOTHING),
    Row("grant by event", lambda w: w.write(
        w.owner, 9000, [["h", w.private], ["p", w.outsider.pubkey]]), NOTHING),
    Row("rejoin", lambda w: w.write(w.owner, 9000, [["h", w.private], ["p", w.member.pubkey]]),
        MEMBER, setup=_remove_member),
    Row("removal", _remove_member, MEMBER),
    Row("self removal",
        lambda w: w.write(w.member, 9001, [["h", w.private], ["p", w.member.pubkey]]), MEMBER),
    Row("role change", lambda w: w.write(
        w.owner, 9000, [["h", w.private], ["p", w.member.pubkey, "admin"]]), MEMBER),
    Row("same role again", lambda w: w.write(
        w.owner, 9000, [["h", w.private], ["p", w.member.pubkey, "member"]]), NOTHING),
    Row("removal of a non-member", lambda w: w.write(
        w.owner, 9001, [["h", w.private], ["p", w.outsider.pubkey]]), NOTHING),
    # channel listing: visibility change, deletion, restore, archive, unarchive
    Row("visibility change", lambda w: w.write(w.owner, 9002, [["h", w.open], ["private"]]),
        LISTING),
    Row("visibility change by operator", lambda w: channel_services.channel_update(
        community_id=w.community.pk, channel_id=uuid.UUID(w.private), visibility="open"),
        LISTING),
    Row("rename", lambda w: w.write(w.owner, 9002, [["h", w.open], ["name", "renamed"]]),
        NOTHING),
    Row("same visibility again", lambda w: w.write(w.owner, 9002, [["h", w.open], ["public"]]),
        NOTHING),
    Row("deletion", lambda w: w.write(w.owner, 9008, [["h", w.open]]), LISTING),
    Row("restore", _channel("channel_restore"), LISTING, setup=_channel("channel_delete")),
    Row("archive", _channel("channel_archive"), LISTING),
    Row("unarchive", _channel("channel_unarchive"), LISTING, setup=_channel("channel_archive")),
    Row("archive again", _channel("channel_archive"), NOTHING, setup=_channel("channel_archive")),
    # artifact policy change
    Row("artifacts disabled", _policy(artifacts_enabled=False), LISTING),
    Row("allowed types", _policy(artifact_types=["buzz.task"]), LISTING),
    Row("open channel creation", _policy(open_channel_creation=True), LISTING),
    Row("admin list", _policy(admin_pubkeys=[]), LISTING),
    Row("community rename", _policy(name="Renamed"), NOTHING),
    Row("unchanged policy", _policy(artifacts_enabled=True, artifact_types=None), NOTHING),
    # Not a row of the table: creation counts as a listing change (no stamp) and grants.
    Row("channel created", lambda w: w.write(
        w.owner, 9007, [["h", str(uuid.uuid4())], ["name", "new"]]),
        lambda w: {("listing version",)}),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_exactly_the_listed_stamps_move(world: World, row: Row) -> None:
    row.setup(world)
    before = snapshot(world.community)
    start = _db_clock()
    row.action(world)
    end = _db_clock()
    after = snapshot(world.community)

    moved = {key for key in before if before[key] != after[key]}
    assert moved == row.moved(world)
    for key in moved | (after.keys() - before.keys()):
        value = after[key]
        if isinstance(value, datetime):
            assert start <= value <= end, (key, start, value, end)


def test_a_move_revision_records_its_source_and_every_other_revision_none(world: World) -> None:
    moved = world.artifact("move", world.private, world.head)
    revisions = dict(ArtifactRevision.objects.values_list("event_id", "source_channel_id"))
    assert str(revisions.pop(moved)) == world.open
    assert set(revisions.values()) == {None}


def test_new_rows_are_stamped_by_the_writing_statement(world: World) -> None:
    start = _db_clock()
    d = _new_d(world)
    write(world.community, world.owner, 9000, [["h", world.private], ["p", world.outsider.pubkey]])
    end = _db_clock()
    head = ArtifactHead.objects.get(event_id=d)
    member = ChannelMember.objects.get(pubkey=world.outsider.pubkey)
    for stamp in (head.modified_at, ArtifactRevision.objects.get(event_id=d).modified_at,
                  member.sync_modified_at):
        assert start <= stamp <= end
