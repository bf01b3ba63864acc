"""Artifact revisions: permissions, what refusals may reveal, moves and their markers, races."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connection, connections

from artifacts.models import ArtifactHead, ArtifactRevision, Community, Event
from artifacts.services.artifact_revisions import artifact_lock_key
from artifacts.services.channels import channel_archive
from artifacts.services.communities import community_update_policy
from artifacts.services.ingest import IngestResult, ingest_event
from nostr.events import parse_event
from tests.factories import (
    Key,
    add_member,
    artifact_op,
    artifact_tags,
    create_artifact,
    make_channel,
    make_community,
    make_key,
    move_artifact,
    signed_event,
    update_artifact,
    write,
)


def test_anyone_writes_in_an_open_channel(community: Community, alice: Key, bob: Key) -> None:
    h = make_channel(community)
    d, head = create_artifact(community, alice, h)
    head = update_artifact(community, bob, d, h, prev=head, title="bob's edit")
    assert ArtifactHead.objects.get(artifact_id=d).event_id == head


def test_private_channel_needs_active_membership(
    community: Community, alice: Key, bob: Key
) -> None:
    h = make_channel(community, visibility="private", owner=alice)
    result = artifact_op(community, bob, op="create", d=str(uuid.uuid4()), h=h, expect=False)
    assert result.message == f"restricted: cannot write in channel {h}"
    add_member(community, h, bob)
    create_artifact(community, bob, h)
    write(community, alice, 9001, [["h", h], ["p", bob.pubkey]])
    result = artifact_op(community, bob, op="create", d=str(uuid.uuid4()), h=h, expect=False)
    assert result.message == f"restricted: cannot write in channel {h}"


def test_a_private_channel_answers_exactly_as_a_missing_one(
    community: Community, alice: Key, bob: Key
) -> None:
    private = make_channel(community, visibility="private", owner=alice)
    missing = str(uuid.uuid4())
    answers = []
    for h in (private, missing):
        result = artifact_op(community, bob, op="create", d=str(uuid.uuid4()), h=h, expect=False)
        answers.append(result.message.replace(h, "<h>"))
    assert answers[0] == answers[1]


def test_an_unreadable_artifact_answers_exactly_as_a_missing_one(
    community: Community, alice: Key, bob: Key
) -> None:
    private = make_channel(community, visibility="private", owner=alice)
    open_channel = make_channel(community)
    d, head = create_artifact(community, alice, private)
    for op in ("update", "move", "delete"):
        hidden = artifact_op(
            community, bob, op=op, d=d, h=open_channel, prev=head, expect=False
        ).message
        missing = artifact_op(
            community, bob, op=op, d=str(uuid.uuid4()), h=open_channel, prev=head, expect=False
        ).message
        assert hidden == missing == "invalid: artifact head unavailable"
    # A stale prev does not reveal the head either (the channel check comes first).
    assert artifact_op(
        community, bob, op="update", d=d, h=private, prev="0" * 64, expect=False
    ).message == f"restricted: cannot write in channel {private}"


def test_deleted_channels_refuse_writes_like_missing_ones(
    community: Community, alice: Key
) -> None:
    h = make_channel(community, owner=alice)
    d, head = create_artifact(community, alice, h)
    write(community, alice, 9008, [["h", h]])
    result = artifact_op(community, alice, op="update", d=d, h=h, prev=head, expect=False)
    assert result.message == f"restricted: cannot write in channel {h}"


def test_archived_channels_refuse_writes(community: Community, alice: Key) -> None:
    h = make_channel(community)
    d, head = create_artifact(community, alice, h)
    channel_archive(community_id=community.pk, channel_id=uuid.UUID(h))
    result = artifact_op(community, alice, op="update", d=d, h=h, prev=head, expect=False)
    assert result.message == f"restricted: channel {h} is archived"
    # ... including moves out of them.
    to = make_channel(community)
    result = artifact_op(community, alice, op="move", d=d, h=to, prev=head, expect=False)
    assert result.message == f"restricted: channel {h} is archived"


def test_move_needs_write_access_to_both_channels(
    community: Community, alice: Key, bob: Key
) -> None:
    source = make_channel(community, visibility="private", owner=alice, members=[bob])
    target = make_channel(community, visibility="private", owner=alice)
    d, head = create_artifact(community, bob, source)
    result = artifact_op(community, bob, op="move", d=d, h=target, prev=head, expect=False)
    assert result.message == f"restricted: cannot write in channel {target}"
    add_member(community, target, bob)
    write(community, alice, 9001, [["h", source], ["p", bob.pubkey]])
    result = artifact_op(community, bob, op="move", d=d, h=target, prev=head, expect=False)
    assert result.message == "invalid: artifact head unavailable"
    assert not Event.objects.filter(kind=45011).exists()


def test_artifact_policy_is_enforced(alice: Key, db: None) -> None:
    community = make_community(artifact_types=["buzz.task"])
    h = make_channel(community)
    result = artifact_op(
        community, alice, op="create", d=str(uuid.uuid4()), h=h, type="buzz.note", expect=False
    )
    assert result.message == "restricted: artifact type buzz.note is not allowed here"
    create_artifact(community, alice, h, type="buzz.task")
    community_update_policy(community_id=community.pk, artifacts_enabled=False)
    result = artifact_op(community, alice, op="create", d=str(uuid.uuid4()), h=h, expect=False)
    assert result.message == "restricted: artifacts are disabled in this community"


@pytest.mark.parametrize(
    ("tags_change", "reason"),
    [
        (lambda t: [x for x in t if x[0] != "ar"], "invalid: missing ar tag"),
        (lambda t: [["ar", "2"] if x[0] == "ar" else x for x in t],
         "invalid: unsupported artifact envelope version (ar must be 1)"),
        (lambda t: [*t, ["d", str(uuid.uuid4())]], "invalid: more than one d tag"),
        (lambda t: [["op", "edit"] if x[0] == "op" else x for x in t],
         "invalid: op must be create, update, move, delete or restore"),
        (lambda t: [["type", "Buzz.Task"] if x[0] == "type" else x for x in t], None),
        (lambda t: [["type", "buzz..task"] if x[0] == "type" else x for x in t], None),
        (lambda t: [x for x in t if x[0] != "title"], "invalid: create needs a title tag"),
        (lambda t: [["title", "  "] if x[0] == "title" else x for x in t], None),
        (lambda t: [["title", "t" * 513] if x[0] == "title" else x for x in t], None),
        (lambda t: [["h", "00000000-0000-0000-0000-000000000000"] if x[0] == "h" else x
                    for x in t], None),
        (lambda t: [["d", x[1], "extra"] if x[0] == "d" else x for x in t],
         "invalid: d tag must have exactly one value"),
        (lambda t: [*t, ["root", "ABC"]], None),
    ],
)
def test_envelope_checks(
    community: Community,
    alice: Key,
    tags_change: Callable[[list[list[str]]], list[list[str]]],
    reason: str | None,
) -> None:
    h = make_channel(community)
    tags = tags_change(artifact_tags(op="create", d=str(uuid.uuid4()), h=h))
    result = write(community, alice, 45010, tags, "{}", expect=False)
    assert result.message.startswith("invalid: ")
    if reason is not None:
        assert result.message == reason
    assert not ArtifactHead.objects.exists()


def test_root_is_kept_and_delete_must_preserve_it(community: Community, alice: Key) -> None:
    h = make_channel(community)
    root = "ab" * 32
    d, head = create_artifact(community, alice, h, extra=[["root", root]])
    assert ArtifactHead.objects.get(artifact_id=d).root == root
    result = artifact_op(community, alice, op="delete", d=d, h=h, prev=head, expect=False)
    assert result.message == "invalid: delete preserves root"
    artifact_op(community, alice, op="delete", d=d, h=h, prev=head, extra=[["root", root]])


def test_move_stores_one_relay_signed_marker_in_the_source(
    community: Community, alice: Key
) -> None:
    source, target = make_channel(community), make_channel(community)
    d, head = create_artifact(community, alice, source)
    moved = move_artifact(community, alice, d, target, prev=head)
    revision = ArtifactRevision.objects.get(event_id=moved)
    assert revision.op == "move"
    assert str(revision.source_channel_id) == source
    assert str(revision.channel_id) == target
    head_row = ArtifactHead.objects.get(artifact_id=d)
    assert (head_row.event_id, str(head_row.channel_id)) == (moved, target)
    (stored,) = Event.objects.filter(kind=45011)
    marker = parse_event(stored.raw, now=int(time.time()))  # id and signature verify
    assert marker.pubkey == settings.RELAY_PUBKEY == stored.pubkey
    assert marker.tags == (
        ("ar", "1"), ("d", d), ("h", source), ("reason", "moved"), ("prev", head),
    )
    assert marker.content == ""
    assert str(stored.channel_id) == source
    # Other revisions carry no source.
    assert ArtifactRevision.objects.filter(source_channel_id__isnull=False).count() == 1


def test_a_redacted_head_stays_the_head_and_can_be_updated(
    community: Community, alice: Key
) -> None:
    h = make_channel(community, owner=alice)
    d, head = create_artifact(community, alice, h)
    write(community, alice, 9005, [["h", h], ["e", head]])
    new = update_artifact(community, alice, d, h, prev=head, title="back")
    assert ArtifactHead.objects.get(artifact_id=d).event_id == new


def test_delete_and_restore(community: Community, alice: Key, bob: Key) -> None:
    h = make_channel(community)
    d, head = create_artifact(community, alice, h)
    deleted = artifact_op(community, bob, op="delete", d=d, h=h, prev=head).event_id
    assert ArtifactHead.objects.get(artifact_id=d).deleted
    restored = artifact_op(community, bob, op="restore", d=d, h=h, prev=deleted).event_id
    head_row = ArtifactHead.objects.get(artifact_id=d)
    assert (head_row.event_id, head_row.deleted) == (restored, False)


# -- races: separate connections, real concurrency ---------------------------------------------


def _conninfo() -> str:
    db = connection.settings_dict
    return psycopg.conninfo.make_conninfo(
        dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"] or None,
        host=db["HOST"] or None, port=db["PORT"] or None,
    )


def _race(
    community: Community, events: list[dict[str, Any]], key_holder: int
) -> list[IngestResult]:
    """Ingest `events` on one thread each while `key_holder`'s advisory lock is held elsewhere,
    then release it once every thread waits for a lock (that one, or an identical event's
    unique key): all of them contend for the head at once."""
    results: list[IngestResult | None] = [None] * len(events)

    def run(index: int) -> None:
        try:
            results[index] = ingest_event(
                community=community, raw=events[index],
                authenticated_pubkeys=(events[index]["pubkey"],),
            )
        finally:
            connections.close_all()

    with psycopg.connect(_conninfo(), autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", [key_holder])
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(events))]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            row = holder.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            ).fetchone()
            if row and row[0] >= len(events):
                break
            time.sleep(0.01)
        else:
            pytest.fail("the writers never queued on the artifact lock")
        holder.execute("SELECT pg_advisory_unlock(%s)", [key_holder])
        for thread in threads:
            thread.join(30)
    finished = [r for r in results if r is not None]
    assert len(finished) == len(events), "a writer thread failed"
    return finished


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("writers", [2, 4])
def test_racing_writers_on_one_head_exactly_one_wins(writers: int) -> None:
    community = make_community()
    authors = [make_key() for _ in range(writers)]
    h = make_channel(community)
    d, head = create_artifact(community, authors[0], h)
    updates = [
        signed_event(a, 45010, artifact_tags(op="update", d=d, h=h, prev=head, title=f"by {i}"),
                     "{}")
        for i, a in enumerate(authors)
    ]
    results = _race(community, updates, artifact_lock_key(community.pk, uuid.UUID(d)))
    winners = [r for r in results if r.accepted]
    assert len(winners) == 1 and winners[0].message == ""
    assert all(r.message == "invalid: artifact head changed" for r in results if not r.accepted)
    assert ArtifactHead.objects.get(artifact_id=d).event_id == winners[0].event_id
    revisions = list(
        ArtifactRevision.objects.filter(artifact_id=d).values_list("event_id", "prev_event_id")
    )
    assert sorted(revisions) == sorted([(head, None), (winners[0].event_id, head)])
    assert Event.objects.filter(kind=45010).count() == 2


@pytest.mark.django_db(transaction=True)
def test_racing_creates_of_one_d_exactly_one_wins() -> None:
    community = make_community()
    h = make_channel(community)
    d = str(uuid.uuid4())
    authors = [make_key(), make_key()]
    creates = [
        signed_event(a, 45010, artifact_tags(op="create", d=d, h=h, title=a.pubkey[:8]), "{}")
        for a in authors
    ]
    results = _race(community, creates, artifact_lock_key(community.pk, uuid.UUID(d)))
    assert sorted(r.message for r in results) == ["", "invalid: artifact identity is taken"]
    assert ArtifactRevision.objects.filter(artifact_id=d).count() == 1


@pytest.mark.django_db(transaction=True)
def test_racing_moves_leave_one_marker() -> None:
    community = make_community()
    alice = make_key()
    source, a, b = (make_channel(community) for _ in range(3))
    d, head = create_artifact(community, alice, source)
    moves = [
        signed_event(alice, 45010, artifact_tags(op="move", d=d, h=to, prev=head), "{}")
        for to in (a, b)
    ]
    results = _race(community, moves, artifact_lock_key(community.pk, uuid.UUID(d)))
    assert sum(r.accepted for r in results) == 1
    assert Event.objects.filter(kind=45011).count() == 1
    assert ArtifactRevision.objects.filter(source_channel_id__isnull=False).count() == 1


@pytest.mark.django_db(transaction=True)
def test_identical_concurrent_submissions_store_once() -> None:
    community = make_community()
    alice = make_key()
    h = make_channel(community)
    d, head = create_artifact(community, alice, h)
    update = signed_event(alice, 45010, artifact_tags(op="update", d=d, h=h, prev=head), "{}")
    results = _race(community, [update, update], artifact_lock_key(community.pk, uuid.UUID(d)))
    assert sorted(r.message for r in results) == ["", "duplicate: already have this event"]
    assert all(r.accepted for r in results)
    assert ArtifactRevision.objects.filter(artifact_id=d).count() == 2
