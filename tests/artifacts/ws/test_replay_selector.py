"""The WebSocket replay selector agrees with live matching (Hypothesis, real PostgreSQL).

Random artifact histories (creates, updates, moves, deletes, redactions) in open and private
channels, random NIP-01 filters and reader sets: what `replay_events` returns is exactly the
stored events that are replayable for the readers (current heads, tombstones included, not
redacted; markers; in readable channels) AND that `Filter.matches` accepts, newest first.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from artifacts.models import ArtifactHead, Event
from artifacts.selectors.replay import (
    channel_states,
    community_policy,
    replay_events,
    replay_statement,
)
from artifacts.services.channels import channel_delete
from artifacts.services.communities import community_update_policy
from artifacts.ws.filters import LiveEvent
from artifacts.ws.filters import parse_req_filter as parse_filter
from nostr.events import first_tag, served_event
from tests.factories import (
    create_artifact,
    delete_artifact,
    make_channel,
    make_community,
    make_key,
    move_artifact,
    redact,
    update_artifact,
)

OWNER = make_key()
MEMBER = make_key()
OUTSIDER = make_key()

ops = st.lists(
    st.tuples(
        st.sampled_from(["create", "update", "move", "delete", "redact"]),
        st.integers(0, 2),  # channel index
        st.integers(0, 5),  # artifact index (modulo existing)
    ),
    min_size=1,
    max_size=9,
)


def _history(community: Any, channels: list[str], plan: list[tuple[str, int, int]]) -> None:
    artifacts: list[dict[str, Any]] = []  # {"d", "h", "head", "deleted"}
    for op, channel_index, pick in plan:
        h = channels[channel_index]
        if op == "create" or not artifacts:
            d, head = create_artifact(community, OWNER, h)
            artifacts.append({"d": d, "h": h, "head": head, "deleted": False})
            continue
        art = artifacts[pick % len(artifacts)]
        if art["deleted"]:
            continue
        if op == "update":
            art["head"] = update_artifact(community, OWNER, art["d"], art["h"], prev=art["head"])
        elif op == "move" and h != art["h"]:
            art["head"] = move_artifact(community, OWNER, art["d"], h, prev=art["head"])
            art["h"] = h
        elif op == "delete":
            art["head"] = delete_artifact(community, OWNER, art["d"], art["h"], prev=art["head"])
            art["deleted"] = True
        elif op == "redact" and art.get("redacted") != art["head"]:
            redact(community, OWNER, art["h"], art["head"])
            art["redacted"] = art["head"]


def _live(row: Event, types: dict[str, str]) -> LiveEvent:
    event = served_event(orjson.loads(row.raw))
    d = first_tag(event, "d") or ""
    return LiveEvent(
        id=row.event_id,
        pubkey=row.pubkey,
        kind=row.kind,
        created_at=row.created_at,
        channel_id=str(row.channel_id),
        artifact_id=d,
        artifact_type=types.get(d),
        raw=row.raw,
    )


@st.composite
def filters(draw: Any, universe: dict[str, list[Any]]) -> dict[str, Any]:
    chosen: dict[str, Any] = {}
    for key in ("ids", "authors", "#h", "#d"):
        if universe[key] and draw(st.booleans()):
            chosen[key] = draw(st.lists(st.sampled_from(universe[key]), max_size=3))
    if draw(st.booleans()):
        chosen["kinds"] = draw(st.sampled_from([[45010], [45011], [45010, 45011]]))
    times = universe["created_at"]
    if times and draw(st.booleans()):
        chosen["since"] = draw(st.sampled_from(times))
    if times and draw(st.booleans()):
        chosen["until"] = draw(st.sampled_from(times))
    return chosen


# Committed data: every read runs in a transaction of its own (artifacts.selectors.budget).
@pytest.mark.django_db(transaction=True)
@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    plan=ops,
    readers=st.sampled_from([[OUTSIDER], [MEMBER], [OUTSIDER, MEMBER]]),
    data=st.data(),
)
def test_replay_is_what_live_matching_accepts_among_replayable_events(
    plan: list[tuple[str, int, int]], readers: list[Any], data: st.DataObject
) -> None:
    community = make_community(host=f"{uuid.uuid4().hex}.example")
    channels = [
        make_channel(community, owner=OWNER, name="open"),
        make_channel(community, owner=OWNER, name="members", visibility="private",
                     members=[MEMBER]),
        make_channel(community, owner=OWNER, name="closed", visibility="private"),
    ]
    _history(community, channels, plan)
    pubkeys = {r.pubkey for r in readers}

    rows = list(Event.objects.filter(community=community, kind__in=[45010, 45011]))
    heads = set(ArtifactHead.objects.filter(community=community).values_list("event_id", flat=True))
    types = {
        str(a): t
        for a, t in ArtifactHead.objects.filter(community=community).values_list(
            "artifact_id", "artifact_type"
        )
    }
    states = channel_states(community_id=community.pk, channel_ids=channels)
    policy = community_policy(community_id=community.pk)
    replayable = [
        row for row in rows
        if row.deleted_at is None
        and (row.kind == 45011 or row.event_id in heads)
        and states[str(row.channel_id)].readable_by_any(pubkeys)
        and policy.allows(types.get(first_tag(served_event(orjson.loads(row.raw)), "d") or ""))
    ]
    universe: dict[str, list[Any]] = {
        "ids": [r.event_id for r in rows],
        "authors": sorted({r.pubkey for r in rows}),
        "#h": channels,
        "#d": sorted(types),
        "created_at": sorted({r.created_at for r in rows}),
    }
    raw_filter = data.draw(filters(universe))
    flt = parse_filter(raw_filter, max_limit=1000)
    expected = [r for r in replayable if flt.matches(_live(r, types))]
    expected.sort(key=lambda r: (-r.created_at, r.event_id))

    got = replay_events(
        community_id=community.pk, pubkeys=pubkeys, kinds=flt.kinds, ids=flt.ids,
        authors=flt.authors, channels=flt.channels, artifacts=flt.artifacts,
        since=flt.since, until=flt.until, limit=flt.limit,
    )
    assert [event_id for _, event_id, _ in got] == [r.event_id for r in expected]
    assert all(raw == r.raw for (_, _, raw), r in zip(got, expected, strict=True))
    # Read in pages of any size (artifacts.ws.consumer reads it as the connection drains),
    # each starting after the last row of the one before, the replay is the same rows in the
    # same order: none lost or repeated at a page boundary, equal created_at included.
    page_rows = data.draw(st.integers(1, 4), label="page rows")
    paged: list[Any] = []
    after = None
    while True:
        page = replay_events(
            community_id=community.pk, pubkeys=pubkeys, kinds=flt.kinds, ids=flt.ids,
            authors=flt.authors, channels=flt.channels, artifacts=flt.artifacts,
            since=flt.since, until=flt.until, limit=page_rows, after=after,
        )
        paged += page
        if len(page) < page_rows:
            break
        after = page[-1][0], page[-1][1]
    assert paged == got
    # `limit` keeps the newest.
    if len(expected) > 1:
        limited = replay_events(
            community_id=community.pk, pubkeys=pubkeys, kinds=flt.kinds, channels=flt.channels,
            ids=flt.ids, authors=flt.authors, artifacts=flt.artifacts, since=flt.since,
            until=flt.until, limit=1,
        )
        assert [e for _, e, _ in limited] == [expected[0].event_id]


@pytest.mark.django_db(transaction=True)
def test_policy_changes_apply_to_the_replay() -> None:
    community = make_community(host="policy.example", artifact_types=["buzz.note", "buzz.task"])
    h = make_channel(community, owner=OWNER)
    _, note = create_artifact(community, OWNER, h, type="buzz.note")
    _, task = create_artifact(community, OWNER, h, type="buzz.task")

    def replayed() -> set[str]:
        rows = replay_events(
            community_id=community.pk, pubkeys=[OWNER.pubkey], kinds=[45010, 45011], limit=10
        )
        return {event_id for _, event_id, _ in rows}

    assert replayed() == {note, task}
    community_update_policy(community_id=community.pk, artifact_types=["buzz.task"])
    assert replayed() == {task}
    community_update_policy(community_id=community.pk, artifacts_enabled=False)
    assert replayed() == set()
    community_update_policy(community_id=community.pk, artifacts_enabled=True, artifact_types=None)
    assert replayed() == {note, task}
    channel_delete(community_id=community.pk, channel_id=uuid.UUID(h))
    assert replayed() == set()


def _plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _plan_nodes(child))]


@pytest.mark.django_db(transaction=True)
def test_a_replay_reads_limit_heads_of_each_channel_not_all_of_them() -> None:
    """artifact_heads_replay serves the replay's order, so each readable channel's page stops
    after `limit` heads instead of reading the channel and sorting it."""
    community = make_community(host="replay-index.example")
    channels = [make_channel(community, owner=OWNER), make_channel(community, owner=OWNER)]
    for h in channels:
        for _ in range(30):
            create_artifact(community, OWNER, h)
    statement = replay_statement(
        community_id=community.pk, pubkeys=[OWNER.pubkey], kinds=[45010, 45011], ids=None,
        authors=None, channels=None, artifacts=None, since=None, until=None, limit=5,
    )
    assert statement is not None
    sql, params = statement
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")  # 60 heads: a scan would be cheaper here
        try:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
            plan = cursor.fetchone()[0]
        finally:
            cursor.execute("RESET enable_seqscan")
    scans = [n for n in _plan_nodes(plan[0]["Plan"]) if n.get("Relation Name") == "artifact_heads"
             and n.get("Alias") == "h"]
    assert scans and {n["Index Name"] for n in scans} == {"artifact_heads_replay"}, scans
    assert all(n["Actual Loops"] == 2 and n["Actual Rows"] <= 5 for n in scans), scans
    rows = replay_events(community_id=community.pk, pubkeys=[OWNER.pubkey], kinds=[45010],
                         limit=5)
    assert len(rows) == 5 and rows == sorted(rows, key=lambda r: (-r[0], r[1]))

