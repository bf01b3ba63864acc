"""Plain POST /query reads: readability exactly as PROTOCOL.md section 1, order, tags, paging."""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson
import pytest

from artifacts.selectors.filters import parse_filter
from artifacts.selectors.plain_reads import plain_query
from artifacts.services.channels import channel_archive
from artifacts.services.communities import community_update_policy
from tests.artifacts.selectors.reference import load_world
from tests.factories import (
    Key,
    add_member,
    artifact_tags,
    create_artifact,
    delete_artifact,
    make_channel,
    make_community,
    make_key,
    move_artifact,
    redact,
    update_artifact,
    write,
)

pytestmark = pytest.mark.django_db(transaction=True)


def read(community: Any, reader: Key, **fields: Any) -> list[dict[str, Any]]:
    query = parse_filter({"artifact": "current", **fields})
    return [
        orjson.loads(raw)
        for raw in plain_query(community_id=community.pk, reader=reader.pubkey, query=query)
    ]


def ids(events: list[dict[str, Any]]) -> list[str]:
    return [event["id"] for event in events]


def tag(event: dict[str, Any], name: str) -> str:
    return next(t[1] for t in event["tags"] if t[0] == name)


def test_each_readability_condition() -> None:
    owner, member, outsider, admin = make_key(), make_key(), make_key(), make_key()
    community = make_community(admins=[admin])
    open_h = make_channel(community, owner=owner)
    private_h = make_channel(community, owner=owner, visibility="private", members=[member])
    doomed_h = make_channel(community, owner=owner)
    archived_h = make_channel(community, owner=owner)
    d_open, _ = create_artifact(community, owner, open_h)
    d_private, _ = create_artifact(community, owner, private_h)
    create_artifact(community, owner, doomed_h)
    d_archived, _ = create_artifact(community, owner, archived_h)
    d_deleted, head = create_artifact(community, owner, open_h)
    delete_artifact(community, owner, d_deleted, open_h, prev=head)
    _, redacted_head = create_artifact(community, owner, open_h)
    redact(community, owner, open_h, redacted_head)
    d_revived, revived_head = create_artifact(community, owner, open_h)
    redact(community, owner, open_h, revived_head)
    # A redacted head stays the head: an update naming it makes the artifact readable again.
    revived = update_artifact(community, owner, d_revived, open_h, prev=revived_head)
    write(community, owner, 9008, [["h", doomed_h]])
    channel_archive(community_id=community.pk, channel_id=uuid.UUID(archived_h))

    everyone = {d_open, d_archived, d_revived}
    assert {tag(e, "d") for e in read(community, outsider)} == everyone
    # Community admins manage channels; that does not make private channels readable.
    assert {tag(e, "d") for e in read(community, admin)} == everyone
    assert {tag(e, "d") for e in read(community, member)} == everyone | {d_private}
    assert revived in ids(read(community, outsider))
    for reader in (owner, member, outsider, admin):
        world = load_world(community)
        assert {tag(e, "d") for e in read(community, reader)} == set(world.readable(reader.pubkey))

    write(community, owner, 9001, [["h", private_h], ["p", member.pubkey]])
    assert d_private not in {tag(e, "d") for e in read(community, member)}
    add_member(community, private_h, member)
    assert d_private in {tag(e, "d") for e in read(community, member)}


def test_policy_disables_artifacts_or_types() -> None:
    owner = make_key()
    community = make_community()
    h = make_channel(community, owner=owner)
    d_task, _ = create_artifact(community, owner, h, type="buzz.task")
    d_note, _ = create_artifact(community, owner, h, type="buzz.note")
    community_update_policy(community_id=community.pk, artifact_types=["buzz.note"])
    assert [tag(e, "d") for e in read(community, owner)] == [d_note]
    community_update_policy(community_id=community.pk, artifacts_enabled=False)
    assert read(community, owner) == []
    community_update_policy(
        community_id=community.pk, artifacts_enabled=True, artifact_types=None
    )
    assert {tag(e, "d") for e in read(community, owner)} == {d_task, d_note}


def test_order_is_created_at_descending_then_id_and_paging() -> None:
    owner = make_key()
    community = make_community()
    h = make_channel(community, owner=owner)
    now = int(time.time())
    created = {}
    for index, created_at in enumerate([now - 50, now - 10, now - 10, now - 10, now - 30]):
        d = str(uuid.uuid4())
        tags = artifact_tags(op="create", d=d, h=h, title=f"task {index}")
        created[d] = write(community, owner, 45010, tags, created_at=created_at).event_id
    events = read(community, owner)
    expected = sorted(events, key=lambda e: (-e["created_at"], e["id"]))
    assert ids(events) == ids(expected)
    assert len(events) == 5
    assert ids(read(community, owner, limit=2)) == ids(expected)[:2]
    assert ids(read(community, owner, limit=2, offset=2)) == ids(expected)[2:4]
    assert ids(read(community, owner, offset=4)) == ids(expected)[4:]
    assert read(community, owner, offset=5) == []


def test_tag_predicates_or_within_a_name_and_across_names() -> None:
    owner = make_key()
    community = make_community()
    a, b = make_channel(community, owner=owner), make_channel(community, owner=owner)
    d1, _ = create_artifact(community, owner, a, type="buzz.task", title="alpha")
    d2, _ = create_artifact(community, owner, b, type="buzz.note", title="beta")
    d3, _ = create_artifact(community, owner, b, type="buzz.task", title="gamma",
                            extra=[["t", "urgent"]])

    def ds(**fields: Any) -> set[str]:
        return {tag(e, "d") for e in read(community, owner, **fields)}

    assert ds(**{"#h": [b]}) == {d2, d3}
    assert ds(**{"#h": [a, b]}) == {d1, d2, d3}
    assert ds(**{"#type": ["buzz.task"]}) == {d1, d3}
    assert ds(**{"#h": [b], "#type": ["buzz.task"]}) == {d3}
    assert ds(**{"#d": [d1, d2]}) == {d1, d2}
    assert ds(**{"#title": ["beta", "gamma"]}) == {d2, d3}
    assert ds(**{"#t": ["urgent"]}) == {d3}
    assert ds(**{"#t": ["urgent"], "#h": [a]}) == set()
    assert ds(kinds=[45010], **{"#op": ["create"]}) == {d1, d2, d3}


def test_history_returns_revisions_whose_own_channel_is_readable_now() -> None:
    owner, outsider = make_key(), make_key()
    community = make_community()
    private_h = make_channel(community, owner=owner, visibility="private")
    open_h = make_channel(community, owner=owner)
    d, first = create_artifact(community, owner, private_h)
    second = update_artifact(community, owner, d, private_h, prev=first)
    third = move_artifact(community, owner, d, open_h, prev=second)
    fourth = update_artifact(community, owner, d, open_h, prev=third)
    redact(community, owner, open_h, fourth)
    fifth = update_artifact(community, owner, d, open_h, prev=fourth)

    def history(reader: Key, **fields: Any) -> set[str]:
        query = parse_filter({"artifact": "history", "#d": [d], **fields})
        raws = plain_query(community_id=community.pk, reader=reader.pubkey, query=query)
        return {orjson.loads(raw)["id"] for raw in raws}

    assert history(owner) == {first, second, third, fifth}
    assert history(outsider) == {third, fifth}
    assert history(owner, **{"#h": [private_h]}) == {first, second}
    assert len(history(outsider, limit=1)) == 1
