"""The ingest service: validation order, prefixes, duplicates, and that refusals store nothing."""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson
import pytest
from django.db import connection

from artifacts.models import (
    ArtifactHead,
    ArtifactRevision,
    Channel,
    ChannelMember,
    Community,
    Event,
)
from artifacts.services.ingest import IngestResult, ingest_event
from artifacts.signals import StoredEvent, events_committed
from nostr.events import compute_event_id
from tests.factories import (
    Key,
    artifact_op,
    artifact_tags,
    create_artifact,
    delete_artifact,
    make_channel,
    signed_event,
    write,
)


def _counts() -> dict[str, int]:
    return {
        "events": Event.objects.count(),
        "revisions": ArtifactRevision.objects.count(),
        "heads": ArtifactHead.objects.count(),
        "members": ChannelMember.objects.count(),
        "channels": Channel.objects.count(),
    }


def _ingest(community: Community, raw: Any, *, as_: str) -> IngestResult:
    return ingest_event(community=community, raw=raw, authenticated_pubkeys=(as_,))


def _resign(event: dict[str, Any], key: Key) -> dict[str, Any]:
    """Recompute id and signature after a test changed fields (so only the change is wrong)."""
    return signed_event(key, event["kind"], event["tags"], event["content"],
                        created_at=event["created_at"])


def _create_event(key: Key, h: str, **overrides: Any) -> dict[str, Any]:
    return signed_event(key, 45010, artifact_tags(op="create", d=str(uuid.uuid4()), h=h), "{}")


def _raw_with(event: dict[str, Any], field: str, json_value: str) -> bytes:
    """The event's JSON with one field's value replaced by raw JSON text."""
    doc = dict(event)
    doc[field] = "__PLACEHOLDER__"
    return orjson.dumps(doc).replace(b'"__PLACEHOLDER__"', json_value.encode())


INVALID_CASES = [
    "wrong id",
    "bad signature",
    "created_at true",
    "float kind",
    "oversized event",
    "oversized tag",
    "far-future created_at",
    "uppercase uuid",
    "missing d tag",
    "malformed tag",
    "duplicate key",
    "NUL in content",
    "NUL in a tag value",
]


@pytest.mark.parametrize("case", INVALID_CASES)
def test_each_invalid_class_answers_invalid_and_stores_nothing(
    community: Community, alice: Key, case: str
) -> None:
    h = make_channel(community)
    event = _create_event(alice, h)
    raw: Any = event
    if case == "wrong id":
        raw = {**event, "id": "0" * 64}
    elif case == "bad signature":
        other = _create_event(alice, h)
        raw = {**event, "sig": other["sig"]}
    elif case == "created_at true":
        raw = _raw_with(event, "created_at", "true")
    elif case == "float kind":
        raw = _raw_with(event, "kind", "45010.0")
    elif case == "oversized event":
        raw = signed_event(alice, 45010, event["tags"], "x" * 70_000)
    elif case == "oversized tag":
        raw = signed_event(alice, 45010, [*event["tags"], ["note", "y" * 5000]], "{}")
    elif case == "far-future created_at":
        raw = signed_event(alice, 45010, event["tags"], "{}", created_at=int(time.time()) + 3600)
    elif case == "uppercase uuid":
        tags = artifact_tags(op="create", d=str(uuid.uuid4()).upper(), h=h)
        raw = signed_event(alice, 45010, tags, "{}")
    elif case == "missing d tag":
        tags = [t for t in event["tags"] if t[0] != "d"]
        raw = signed_event(alice, 45010, tags, "{}")
    elif case == "malformed tag":
        raw = _raw_with(event, "tags", '[["ar","1"],["d"],"h"]')
    elif case == "duplicate key":
        raw = orjson.dumps(event)[:-1] + b',"kind":45010}'
    elif case == "NUL in content":
        raw = orjson.dumps(signed_event(alice, 45010, event["tags"], "a\u0000b"))
    elif case == "NUL in a tag value":
        tags = [*event["tags"], ["note", "x\u0000"]]
        raw = orjson.dumps(signed_event(alice, 45010, tags, "{}"))
    before = _counts()
    result = _ingest(community, raw, as_=alice.pubkey)
    assert result.accepted is False
    assert result.message.startswith("invalid: "), result.message
    assert _counts() == before


@pytest.mark.parametrize(
    ("sequence", "reason"),
    [
        ("update after delete", "invalid: artifact is deleted: only restore is accepted"),
        ("create on a taken d", "invalid: artifact identity is taken"),
        ("move to the same channel", "invalid: move must change h"),
        ("type change", "invalid: artifact type is immutable"),
        ("restore a live artifact", "invalid: artifact is not deleted: nothing to restore"),
        ("update changing h", "invalid: only move changes h"),
        ("stale prev", "invalid: artifact head changed"),
        ("create with prev", "invalid: create takes no prev tag"),
        ("update without prev", "invalid: update needs a prev tag naming the current revision"),
        ("delete with content", "invalid: delete carries empty content"),
        ("unknown d", "invalid: artifact head unavailable"),
    ],
)
def test_illegal_op_sequences_are_invalid_and_store_nothing(
    community: Community, alice: Key, sequence: str, reason: str
) -> None:
    h, other = make_channel(community), make_channel(community)
    d, head = create_artifact(community, alice, h)
    if sequence == "update after delete":
        head = delete_artifact(community, alice, d, h, prev=head)
    before = _counts()
    tags: list[list[str]]
    content = "{}"
    if sequence == "update after delete":
        tags = artifact_tags(op="update", d=d, h=h, prev=head)
    elif sequence == "create on a taken d":
        tags = artifact_tags(op="create", d=d, h=h)
    elif sequence == "move to the same channel":
        tags = artifact_tags(op="move", d=d, h=h, prev=head)
    elif sequence == "type change":
        tags = artifact_tags(op="update", d=d, h=h, prev=head, type="buzz.note")
    elif sequence == "restore a live artifact":
        tags = artifact_tags(op="restore", d=d, h=h, prev=head)
    elif sequence == "update changing h":
        tags = artifact_tags(op="update", d=d, h=other, prev=head)
    elif sequence == "stale prev":
        head2 = artifact_op(community, alice, op="update", d=d, h=h, prev=head).event_id
        assert head2 != head
        before = _counts()
        tags = artifact_tags(op="update", d=d, h=h, prev=head)
    elif sequence == "create with prev":
        tags = artifact_tags(op="create", d=str(uuid.uuid4()), h=h, prev=head)
    elif sequence == "update without prev":
        tags = artifact_tags(op="update", d=d, h=h)
    elif sequence == "delete with content":
        tags = artifact_tags(op="delete", d=d, h=h, prev=head)
    else:
        tags = artifact_tags(op="update", d=str(uuid.uuid4()), h=h, prev=head)
    result = write(community, alice, 45010, tags, content, expect=False)
    assert result.message == reason
    assert _counts() == before


def test_author_other_than_the_authenticated_pubkey_is_restricted(
    community: Community, alice: Key, bob: Key
) -> None:
    event = _create_event(alice, make_channel(community))
    before = _counts()
    result = _ingest(community, event, as_=bob.pubkey)
    assert result.as_ok() == [
        "OK", event["id"], False, "restricted: event author is not authenticated",
    ]
    assert _counts() == before


def test_any_of_several_authenticated_pubkeys_may_author(
    community: Community, alice: Key, bob: Key
) -> None:
    event = _create_event(alice, make_channel(community))
    result = ingest_event(
        community=community, raw=event, authenticated_pubkeys={bob.pubkey, alice.pubkey}
    )
    assert result.accepted and result.message == ""


@pytest.mark.parametrize("kind", [1, 7, 30023, 9009, 22242, 27235])
def test_unknown_kinds_are_blocked(community: Community, alice: Key, kind: int) -> None:
    result = write(community, alice, kind, [["h", make_channel(community)]], expect=False)
    assert result.message.startswith("blocked: ")
    assert not Event.objects.exists()


def test_kind_5_against_an_artifact_is_refused_with_its_reason(
    community: Community, alice: Key
) -> None:
    h = make_channel(community)
    d, head = create_artifact(community, alice, h)
    result = write(community, alice, 5, [["e", head], ["a", f"45010:{alice.pubkey}:{d}"]],
                   expect=False)
    assert result.message.startswith("blocked: kind 5 deletions are not accepted")
    assert ArtifactHead.objects.get(artifact_id=d).deleted is False


def test_clients_cannot_write_removal_markers(community: Community, alice: Key) -> None:
    h = make_channel(community)
    tags = [["ar", "1"], ["d", str(uuid.uuid4())], ["h", h], ["reason", "moved"],
            ["prev", "a" * 64]]
    result = write(community, alice, 45011, tags, expect=False)
    assert result.message.startswith("restricted: ")
    assert not Event.objects.filter(kind=45011).exists()


def test_invalid_answer_echoes_the_claimed_id_when_there_is_one(
    community: Community, alice: Key
) -> None:
    event = _create_event(alice, make_channel(community))
    assert _ingest(community, {**event, "sig": "0" * 128}, as_=alice.pubkey).event_id == event["id"]
    assert _ingest(community, b"not json", as_=alice.pubkey).event_id == ""
    assert _ingest(community, b"[1, 2]", as_=alice.pubkey).message.startswith("invalid: ")


def test_duplicate_is_ok_true_with_no_side_effects(
    community: Community, alice: Key, bob: Key
) -> None:
    h = make_channel(community)
    event = _create_event(alice, h)
    assert _ingest(community, event, as_=alice.pubkey).accepted
    d = next(t[1] for t in event["tags"] if t[0] == "d")
    stamp = ArtifactHead.objects.get(artifact_id=d).modified_at
    before = _counts()
    again = _ingest(community, orjson.dumps(event), as_=alice.pubkey)
    assert again.as_ok() == ["OK", event["id"], True, "duplicate: already have this event"]
    assert _counts() == before
    assert ArtifactHead.objects.get(artifact_id=d).modified_at == stamp


def test_a_resubmitted_revision_is_a_duplicate_even_after_the_head_moved_on(
    community: Community, alice: Key
) -> None:
    h = make_channel(community)
    d, head = create_artifact(community, alice, h)
    update = signed_event(alice, 45010, artifact_tags(op="update", d=d, h=h, prev=head), "{}")
    assert _ingest(community, update, as_=alice.pubkey).accepted
    artifact_op(community, alice, op="update", d=d, h=h, prev=update["id"])
    assert _ingest(community, update, as_=alice.pubkey).message.startswith("duplicate: ")


def test_a_resubmission_after_losing_access_reveals_nothing_new(
    community: Community, alice: Key, bob: Key
) -> None:
    h = make_channel(community, visibility="private", owner=alice, members=[bob])
    event = _create_event(bob, h)
    assert _ingest(community, event, as_=bob.pubkey).accepted
    write(community, alice, 9001, [["h", h], ["p", bob.pubkey]])
    again = _ingest(community, event, as_=bob.pubkey)
    assert again.as_ok() == ["OK", event["id"], True, "duplicate: already have this event"]


def test_repeated_put_of_the_same_role_is_ok_true_without_a_stamp(
    community: Community, alice: Key, bob: Key
) -> None:
    h = make_channel(community, owner=alice)
    write(community, alice, 9000, [["h", h], ["p", bob.pubkey]])
    stamp = ChannelMember.objects.get(pubkey=bob.pubkey).sync_modified_at
    result = write(community, alice, 9000, [["h", h], ["p", bob.pubkey, "member"]],
                   created_at=int(time.time()) - 1)
    assert result.as_ok()[2:] == [True, ""]
    assert ChannelMember.objects.get(pubkey=bob.pubkey).sync_modified_at == stamp


def test_the_stored_raw_is_the_clients_text(community: Community, alice: Key) -> None:
    h = make_channel(community)
    event = _create_event(alice, h)
    spaced = orjson.dumps(event, option=orjson.OPT_INDENT_2)
    assert _ingest(community, spaced, as_=alice.pubkey).accepted
    assert Event.objects.get(event_id=event["id"]).raw == spaced.decode()


def test_events_are_scoped_to_their_community(alice: Key, db: None) -> None:
    from tests.factories import make_community

    one, two = make_community("one.example"), make_community("two.example")
    h = make_channel(one)
    event = _create_event(alice, h)
    assert _ingest(one, event, as_=alice.pubkey).accepted
    # The same channel id does not exist in the other community.
    answer = _ingest(two, event, as_=alice.pubkey).message
    assert answer == f"restricted: cannot write in channel {h}"


@pytest.mark.django_db(transaction=True)
def test_events_committed_is_sent_after_commit_with_every_stored_event(alice: Key) -> None:
    from tests.factories import make_community, move_artifact

    community = make_community()
    h, to = make_channel(community), make_channel(community)
    d, head = create_artifact(community, alice, h)
    received: list[dict[str, Any]] = []

    def receiver(sender: Any, community_id: int, events: list[StoredEvent], **kw: Any) -> None:
        assert not connection.in_atomic_block  # after the commit, outside the transaction
        received.append({"community_id": community_id, "events": events})

    events_committed.connect(receiver)
    try:
        moved = move_artifact(community, alice, d, to, prev=head)
        write(community, alice, 9002, [["h", to], ["private"]], expect=False)  # no rights
        write(community, alice, 9007, [["h", str(uuid.uuid4())], ["name", "x"]], expect=False)
    finally:
        events_committed.disconnect(receiver)
    assert len(received) == 1
    assert received[0]["community_id"] == community.pk
    stored = received[0]["events"]
    assert [e.event.kind for e in stored] == [45010, 45011]
    assert stored[0].event.id == moved and stored[0].channel_id == to
    assert stored[1].channel_id == h
    marker = stored[1].event
    assert orjson.loads(marker.raw) == marker.to_dict()
    assert compute_event_id(marker.pubkey, marker.created_at, 45011, marker.tags, "") \
        == marker.id


@pytest.mark.django_db(transaction=True)
def test_access_changed_names_the_channels_whose_readability_changed(alice: Key) -> None:
    from artifacts.services.channels import channel_archive
    from artifacts.services.communities import community_update_policy
    from artifacts.signals import access_changed
    from tests.factories import add_member, make_community

    community = make_community()
    h = make_channel(community, owner=alice)
    heard: list[list[str] | None] = []

    def receiver(sender: Any, community_id: int, channel_ids: list[str] | None, **kw: Any) -> None:
        assert community_id == community.pk and not connection.in_atomic_block
        heard.append(channel_ids)

    access_changed.connect(receiver)
    try:
        create_artifact(community, alice, h)  # content, not access: nothing heard
        channel_archive(community_id=community.pk, channel_id=uuid.UUID(h))
        add_member(community, h, "b" * 64)
        add_member(community, h, "b" * 64)  # no change: nothing heard
        community_update_policy(community_id=community.pk, artifact_types=["buzz.task"])
    finally:
        access_changed.disconnect(receiver)
    assert heard == [[h], [h], None]


def test_nul_is_refused_naming_why_and_an_escaped_backslash_is_not_a_nul(
    community: Community, alice: Key
) -> None:
    h = make_channel(community)
    tags = artifact_tags(op="create", d=str(uuid.uuid4()), h=h)
    refused = _ingest(community, signed_event(alice, 45010, tags, "a\u0000b"), as_=alice.pubkey)
    assert refused.accepted is False
    assert refused.message.startswith("invalid: ") and "U+0000" in refused.message
    # The JSON text `\\u0000` is a backslash followed by "u0000": storable, accepted.
    literal = signed_event(alice, 45010, tags, "a\\u0000b")
    assert b"\\\\u0000" in orjson.dumps(literal)
    assert _ingest(community, literal, as_=alice.pubkey).accepted is True
