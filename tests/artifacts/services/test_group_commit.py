"""Group commit (artifacts/services/group_commit.py, `async_ingest.apply_batch_async`): writes
that share one transaction answer and leave exactly what one-at-a-time application in arrival
order would. The parity machine (test_async_ingest.py) holds random bursts to the synchronous
driver; these take the cases a batch could get wrong on purpose: a refusal, a lost
compare-and-swap or a duplicate next to an accepted write, two writes of one head in order, a
database error in the middle, batches of two processes contending on the same heads, the bound,
and the session's prepared statements across a rollback to a savepoint."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

import psycopg
import pytest
from django.db import connection
from psycopg.pq import TransactionStatus

from artifacts.models import ArtifactHead, ArtifactRevision, ChannelMember, Community, Event
from artifacts.selectors.fence import FENCE_STATEMENT, prepare_fence
from artifacts.selectors.permissions import ACCESS_SQL
from artifacts.services import async_ingest, transactions
from artifacts.services.artifact_revisions import artifact_lock_key
from artifacts.services.group_commit import ConnectionSource, GroupCommit
from artifacts.services.ingest import IngestResult
from artifacts.ws.publish import community_group, current_sequence, finish_publishing
from relaycore.db import psycopg_connect_kwargs
from tests.factories import (
    Key,
    artifact_tags,
    checked_event,
    make_channel,
    make_community,
    make_key,
    signed_event,
)

pytestmark = pytest.mark.django_db(transaction=True)


async def _connect() -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(**psycopg_connect_kwargs(), autocommit=True)


async def _prepared(conn: psycopg.AsyncConnection[Any]) -> set[str]:
    """The names of the statements `conn`'s session holds prepared."""
    cursor = await conn.execute("SELECT name FROM pg_prepared_statements")
    return {row[0] for row in await cursor.fetchall()}


def _prepared_around(
    community: Community, warm_up: list[dict[str, Any]], batch: list[dict[str, Any]]
) -> tuple[list[IngestResult], set[str], set[str]]:
    """`batch`'s results on one connection (its fence prepared, `warm_up` written first), and
    the statements its session held prepared before and after it."""

    async def run() -> tuple[list[IngestResult], set[str], set[str]]:
        conn = await _connect()
        try:
            await prepare_fence(conn)
            committer = GroupCommit(_lent(conn))
            await _together(committer, community, warm_up)
            before = await _prepared(conn)
            results = await _together(committer, community, batch)
            after = await _prepared(conn)
            await finish_publishing()
            return results, before, after
        finally:
            await conn.close()

    return asyncio.run(run())


async def _together(
    committer: GroupCommit, community: Community, events: list[dict[str, Any]]
) -> list[IngestResult]:
    """`events` submitted in one turn of the loop, in order: one batch (up to the bound)."""
    now = int(time.time())
    checked = [checked_event(community, event, now) for event in events]
    return await asyncio.gather(*(
        committer.apply(community_id=community.pk, event=event, now=now) for event in checked
    ))


def _in_one_batch(community: Community, events: list[dict[str, Any]],
                  **options: Any) -> tuple[list[IngestResult], int]:
    """The answers to `events` written together on one connection, and how many batches."""

    async def run() -> tuple[list[IngestResult], int]:
        conn = await _connect()
        try:
            committer = GroupCommit(_lent(conn), **options)
            results = await _together(committer, community, events)
            assert conn.info.transaction_status == TransactionStatus.IDLE
            await finish_publishing()
            return results, committer.batches
        finally:
            await conn.close()

    return asyncio.run(run())


def _lent(conn: psycopg.AsyncConnection[Any]) -> ConnectionSource:
    """A batcher's connection source that lends `conn` every time (and never closes it)."""
    return lambda: contextlib.nullcontext(conn)


def _create(author: Key, h: str, d: str | None = None, n: int = 0) -> dict[str, Any]:
    return signed_event(author, 45010, artifact_tags(op="create", d=d or str(uuid.uuid4()), h=h),
                        f'{{"n":{n}}}')


def _update(author: Key, h: str, d: str, prev: str, n: int = 0) -> dict[str, Any]:
    return signed_event(author, 45010, artifact_tags(op="update", d=d, h=h, prev=prev),
                        f'{{"u":{n}}}')


def _stored(community: Community) -> set[str]:
    return set(Event.objects.filter(community=community).values_list("event_id", flat=True))


def test_a_refusal_in_a_batch_rolls_back_its_own_event_and_nothing_else() -> None:
    community = make_community("refusals.example")
    author, outsider = make_key(), make_key()
    h = make_channel(community, owner=author)
    private = make_channel(community, owner=author, visibility="private")
    first = _create(author, h)
    stale = _update(author, h, str(uuid.uuid4()), "ab" * 32)  # no such head: refused after
    # its INSERT into events ran (the rollback to its savepoint must take that row back)
    second = _create(author, h)
    intruder = signed_event(outsider, 9000, [["h", private], ["p", outsider.pubkey]])
    third = _create(author, h)
    events = [first, stale, second, intruder, third]
    results, batches = _in_one_batch(community, events)
    assert batches == 1
    assert [r.accepted for r in results] == [True, False, True, False, True]
    assert results[1].message == "invalid: artifact head unavailable"
    assert results[3].message.startswith("restricted:")
    assert _stored(community) == {first["id"], second["id"], third["id"]}
    assert ArtifactHead.objects.filter(community=community).count() == 3
    assert not ChannelMember.objects.filter(community=community, pubkey=outsider.pubkey).exists()


def test_a_batch_applies_writes_of_one_head_in_order_with_duplicates_and_lost_swaps() -> None:
    community = make_community("in-order.example")
    author = make_key()
    h = make_channel(community, owner=author)
    d = str(uuid.uuid4())
    create = _create(author, h, d)
    update = _update(author, h, d, create["id"], 1)
    lost = _update(author, h, d, create["id"], 2)  # the same prev: the swap is lost to `update`
    delete = signed_event(author, 45010, artifact_tags(op="delete", d=d, h=h, prev=update["id"],
                                                       title=None))
    other = _create(author, h)
    results, batches = _in_one_batch(community, [create, update, update, lost, other, delete,
                                                 create])
    assert batches == 1
    assert [r.message.split(":")[0] for r in results] == [
        "", "", "duplicate", "invalid", "", "", "duplicate"]
    assert results[3].message == "invalid: artifact head changed"
    assert all(r.accepted for i, r in enumerate(results) if i != 3)
    head = ArtifactHead.objects.get(community=community, artifact_id=d)
    assert (head.event_id, head.deleted) == (delete["id"], True)
    chain = dict(ArtifactRevision.objects.filter(community=community, artifact_id=d)
                 .values_list("event_id", "prev_event_id"))
    assert chain == {create["id"]: None, update["id"]: create["id"], delete["id"]: update["id"]}
    assert _stored(community) == {create["id"], update["id"], delete["id"], other["id"]}


def test_a_database_error_in_a_batch_sends_its_writes_back_one_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The middle write waits past its lock budget (another transaction holds its artifact's
    lock): the batch's transaction fails, and each write is applied again alone, so the writes
    before and after it are stored and it alone answers busy, as without batching."""
    community = make_community("retried.example")
    author = make_key()
    h = make_channel(community, owner=author)
    held = str(uuid.uuid4())
    monkeypatch.setattr(transactions, "WRITE_LOCK_TIMEOUT", "100ms")
    before, blocked, after = _create(author, h), _create(author, h, held), _create(author, h)
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("SELECT pg_advisory_xact_lock(%s)",
                       [artifact_lock_key(community.pk, uuid.UUID(held))])
        try:
            results, batches = _in_one_batch(community, [before, blocked, after])
        finally:
            cursor.execute("ROLLBACK")
    assert batches == 1
    assert [(r.accepted, r.failure) for r in results] == [
        (True, None), (False, "budget_exceeded"), (True, None)]
    assert _stored(community) == {before["id"], after["id"]}


def test_a_flood_is_cut_into_bounded_batches_and_a_lone_write_goes_alone() -> None:
    community = make_community("bounded.example")
    author = make_key()
    h = make_channel(community, owner=author)
    events = [_create(author, h, n=n) for n in range(7)]
    results, batches = _in_one_batch(community, events, max_events=3)
    assert all(r.message == "" for r in results)
    assert batches == 3  # 3 + 3 + 1
    results, batches = _in_one_batch(community, [_create(author, h)], max_events=3)
    assert (results[0].message, batches) == ("", 1)


def test_batches_of_two_processes_contending_on_the_same_heads_swap_one_at_a_time() -> None:
    """Two batchers on two connections (two relay processes), eight writers on two heads each
    round, half of them going through each batcher, in opposite orders (so the two batches also
    wait on each other's locks, to a deadlock that PostgreSQL breaks and that sends a batch
    back to one-at-a-time): each round exactly one update of each head wins its
    compare-and-swap, every other writer's is refused as lost, a create riding in the same
    batches is never affected, and each head's history is one chain."""
    community = make_community("contended.example")
    author = make_key()
    h = make_channel(community, owner=author)
    heads = [str(uuid.uuid4()), str(uuid.uuid4())]
    creates = [_create(author, h, d) for d in heads]
    _in_one_batch(community, creates)
    rounds = 4

    async def run() -> list[list[IngestResult]]:
        conns = [await _connect() for _ in range(2)]
        committers = [GroupCommit(_lent(conn)) for conn in conns]
        answers = []
        try:
            for r in range(rounds):
                read = await conns[0].execute(
                    "SELECT artifact_id::text, event_id FROM artifact_heads"
                    " WHERE community_id = %s", [community.pk])
                current = dict(await read.fetchall())
                updates = [[_update(author, h, d, current[d], r * 10 + n)
                            for n in range(4)] for d in heads]
                # Batcher 0: updates of head 0 then head 1; batcher 1 the other way round.
                mine = [updates[0][:2] + updates[1][:2] + [_create(author, h, n=r)],
                        updates[1][2:] + updates[0][2:] + [_create(author, h, n=100 + r)]]
                results = await asyncio.gather(*(
                    _together(committer, community, events)
                    for committer, events in zip(committers, mine, strict=True)
                ))
                answers.append([*results[0], *results[1]])
            await finish_publishing()
        finally:
            for conn in conns:
                await conn.close()
        return answers

    for results in asyncio.run(run()):
        messages = sorted(r.message for r in results)
        assert messages == ["", "", "", "", *["invalid: artifact head changed"] * 6], messages
    for d in heads:
        chain = dict(ArtifactRevision.objects.filter(community=community, artifact_id=d)
                     .values_list("prev_event_id", "event_id"))
        assert len(chain) == rounds + 1
        walked, at = 0, chain[None]
        while at in chain:
            at, walked = chain[at], walked + 1
        assert walked == rounds
        assert ArtifactHead.objects.get(community=community, artifact_id=d).event_id == at
    # Two creates each round, one per batcher, plus the two heads.
    assert ArtifactHead.objects.filter(community=community).count() == 2 * rounds + 2


def test_a_rollback_to_a_savepoint_keeps_the_sessions_prepared_statements() -> None:
    """psycopg deallocates every prepared statement of a session when it sees a ROLLBACK, the
    fence's among them; a refused write of a batch rolls back to its savepoint only, which
    must not cost the session its prepared statements (the next page would fail its fence)."""
    community = make_community("prepared.example")
    author = make_key()
    h = make_channel(community, owner=author)

    results, before, after = _prepared_around(
        community, [_create(author, h), _create(author, h)],
        [_update(author, h, str(uuid.uuid4()), "ab" * 32), _create(author, h)])
    assert [r.accepted for r in results] == [False, True]
    assert FENCE_STATEMENT in before
    assert before <= after


def test_a_refused_create_among_independent_creates_takes_back_itself_alone() -> None:
    """Creates of distinct artifacts run their first statements together, each behind a savepoint
    of its own; a refused one (its identity taken, a channel its author cannot write in) rolls
    back to its savepoint, which takes the later creates' statements with it: those are written
    again, so every other create is stored, the refused ones are not, and two creates of one
    artifact in a batch still meet in order."""
    community = make_community("creates.example")
    author = make_key()
    h = make_channel(community, owner=author)
    private = make_channel(community, owner=make_key(), visibility="private")
    taken = str(uuid.uuid4())
    _in_one_batch(community, [_create(author, h, taken)])
    again = str(uuid.uuid4())
    events = [
        _create(author, h), _create(author, h, taken, n=1), _create(author, h),
        _create(author, private), _create(author, h), _create(author, h, again),
        _create(author, h, again, n=2), _create(author, h),
    ]
    before = _stored(community)
    results, batches = _in_one_batch(community, events)
    assert batches == 1
    assert [r.message for r in results] == [
        "", "invalid: artifact identity is taken", "", f"restricted: cannot write in channel"
        f" {private}", "", "", "invalid: artifact identity is taken", ""]
    accepted = {e["id"] for e, r in zip(events, results, strict=True) if r.message == ""}
    assert _stored(community) - before == accepted
    assert ArtifactHead.objects.filter(community=community).count() == 1 + len(accepted)


def test_a_run_of_creates_asks_each_authors_standing_once_and_answers_each_by_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of independent creates asks a standing (an author in a channel) once for all its
    creates that need it, each create still answered by its own author's standing in its own
    channel (a member and an outsider writing in a private channel in one run). The run takes
    no savepoint when it opens the batch (a refusal would roll the whole transaction back), one
    after an accepted write, and the batch commits without releasing it first (COMMIT does)."""
    community = make_community("shared-reads.example")
    member, outsider = make_key(), make_key()
    h = make_channel(community, owner=member)
    private = make_channel(community, owner=member, visibility="private")
    sent: list[tuple[str, Any]] = []
    pipeline = async_ingest._pipeline

    async def spy(conn: psycopg.AsyncConnection[Any], batch: Any) -> Any:
        sent.extend(batch)
        return await pipeline(conn, batch)

    monkeypatch.setattr(async_ingest, "_pipeline", spy)
    d = str(uuid.uuid4())
    events = [_create(member, private), _create(member, private), _create(member, h, d),
              _create(member, h), _create(member, private)]
    results, batches = _in_one_batch(community, events)
    assert (batches, [r.message for r in results]) == (1, [""] * 5)
    assert [sql for sql, _ in sent].count(ACCESS_SQL) == 2  # member in private, member in h
    assert [sql for sql, _ in sent if "SAVEPOINT" in sql] == []
    assert _stored(community) >= {e["id"] for e in events}

    sent.clear()
    after_update = [_update(member, h, d, events[2]["id"]), _create(member, h),
                    _create(member, h)]
    results, batches = _in_one_batch(community, after_update)
    assert (batches, [r.message for r in results]) == (1, [""] * 3)
    assert [sql for sql, _ in sent if sql.startswith("SAVEPOINT ")] == [
        "SAVEPOINT buzz_write", "SAVEPOINT buzz_creates"]
    assert sent[-1][0] == "COMMIT" and not sent[-2][0].startswith("RELEASE SAVEPOINT ")
    assert _stored(community) >= {e["id"] for e in after_update}

    mixed = [_create(member, private), _create(outsider, private), _create(outsider, h),
             _create(member, private), _create(outsider, private), _create(member, h)]
    results, batches = _in_one_batch(community, mixed)
    refused = f"restricted: cannot write in channel {private}"
    assert (batches, [r.message for r in results]) == (1, ["", refused, "", "", refused, ""])
    accepted = {e["id"] for e, r in zip(mixed, results, strict=True) if r.accepted}
    assert _stored(community) & {e["id"] for e in mixed} == accepted


def test_a_refused_create_in_a_run_that_opens_the_batch_keeps_the_sessions_prepared_statements(
) -> None:
    """A refusal in a run of creates that opens its batch rolls the whole transaction back and
    begins it again: the creates before it are written again, it is refused alone, and the
    ROLLBACK does not cost the session its prepared statements (psycopg deallocates them all
    when it sees one)."""
    community = make_community("whole-rollback.example")
    author = make_key()
    h = make_channel(community, owner=author)
    taken = str(uuid.uuid4())

    results, before, after = _prepared_around(
        community, [_create(author, h, taken), _create(author, h)],
        [_create(author, h), _create(author, h), _create(author, h, taken, n=1),
         _create(author, h)])
    assert [r.message for r in results] == ["", "", "invalid: artifact identity is taken", ""]
    stored = _stored(community)
    assert {r.event_id for r in results if r.accepted} <= stored
    assert results[2].event_id not in stored
    assert ArtifactHead.objects.filter(community=community).count() == 2 + 3
    assert FENCE_STATEMENT in before
    assert before <= after


def _settled_sequence(group: str) -> int:
    """The group's sequence once the channel's own announcements (sent by the synchronous
    writers' publisher thread, after their commit) are out: read before them, the batch's one
    message would seem to be two (seen in CI under load)."""
    last, steady_since = current_sequence(group), time.monotonic()
    while time.monotonic() - steady_since < 0.5:
        time.sleep(0.05)
        now = current_sequence(group)
        if now != last:
            last, steady_since = now, time.monotonic()
    return last


def test_a_batch_goes_out_live_in_one_numbered_message() -> None:
    """The batch's commits are announced together after its COMMIT, so the loop's publisher
    merges them: one sequence number (Redis INCR) and one PUBLISH for the batch, where one
    transaction per write paid both for every write."""
    community = make_community("one-message.example")
    author = make_key()
    h = make_channel(community, owner=author)
    group = community_group(community.pk)
    before = _settled_sequence(group)
    results, batches = _in_one_batch(community, [_create(author, h, n=n) for n in range(5)])
    assert (batches, [r.message for r in results]) == (1, [""] * 5)
    assert current_sequence(group) == before + 1


def test_a_lone_write_goes_on_its_callers_connection_and_later_ones_wait_for_the_next_batch(
) -> None:
    """Nothing in flight: the write goes at once on the connection its caller holds. Writes that
    arrive meanwhile give their connections back and wait; the next batch (on the batcher's own
    connection) carries them all, after the first committed (the update of its head wins)."""
    community = make_community("lone.example")
    author = make_key()
    h = make_channel(community, owner=author)
    d = str(uuid.uuid4())
    create = _create(author, h, d)
    later = [_update(author, h, d, create["id"]), _create(author, h), _create(author, h)]
    now = int(time.time())

    async def run() -> tuple[list[IngestResult], int, list[int]]:
        callers = [await _connect() for _ in range(1 + len(later))]
        own = await _connect()
        released: list[int] = []
        committer = GroupCommit(_lent(own))

        def writing(index: int, event: dict[str, Any]) -> Any:
            async def release() -> None:
                released.append(index)

            return committer.apply(community_id=community.pk, now=now, conn=callers[index],
                                   release=release, event=checked_event(community, event, now))

        try:
            first = asyncio.create_task(writing(0, create))
            await asyncio.sleep(0)  # the lone write is in flight on its caller's connection
            results = await asyncio.gather(first, *(
                writing(index, event) for index, event in enumerate(later, start=1)))
            for conn in (*callers, own):
                assert conn.info.transaction_status == TransactionStatus.IDLE
            await finish_publishing()
            return results, committer.batches, released
        finally:
            for conn in (*callers, own):
                await conn.close()

    results, batches, released = asyncio.run(run())
    assert [r.message for r in results] == ["", "", "", ""]
    assert (batches, released) == (2, [1, 2, 3])
    assert ArtifactHead.objects.get(community=community, artifact_id=d).event_id == later[0]["id"]
