"""The server loop's ingest (artifacts/services/loop_ingest.py), as `POST /event` and WebSocket
EVENT both run it: the checks answer before any connection is taken; the write goes on the
caller's connection or the loop's pool, or, with group commit, through the loop's batcher."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from django.test import override_settings
from psycopg.pq import TransactionStatus

from artifacts.models import Community, Event
from artifacts.selectors.async_reads import connection_pool
from artifacts.services.group_commit import group_commit
from artifacts.services.ingest import IngestResult
from artifacts.services.loop_ingest import ingest_on_loop
from artifacts.ws.publish import finish_publishing
from relaycore.db import psycopg_connect_kwargs
from tests.factories import Key, artifact_tags, make_channel, make_community, make_key, signed_event

pytestmark = pytest.mark.django_db(transaction=True)


def _create(author: Key, h: str) -> dict[str, Any]:
    return signed_event(author, 45010, artifact_tags(op="create", d=str(uuid.uuid4()), h=h))


def _on_a_loop[T](body: Callable[[], Awaitable[T]]) -> T:
    """`body` on a fresh loop, whose pool is closed and whose announcements are out after it."""

    async def run() -> T:
        try:
            return await body()
        finally:
            await finish_publishing()
            await (await connection_pool()).close()

    return asyncio.run(run())


def _stored(community: Community, event: dict[str, Any]) -> bool:
    return Event.objects.filter(community=community, event_id=event["id"]).exists()


def test_a_refused_event_is_answered_by_the_checks_and_stores_nothing() -> None:
    community = make_community("loop-refused.example")
    author, someone_else = make_key(), make_key()
    event = _create(author, make_channel(community, owner=author))

    async def refused() -> IngestResult:
        # A connection that cannot be used: the checks must answer before any write.
        conn = await psycopg.AsyncConnection.connect(**psycopg_connect_kwargs(), autocommit=True)
        await conn.close()
        return await ingest_on_loop(community=community, raw=json.dumps(event),
                                    authenticated_pubkeys=[someone_else.pubkey], conn=conn)

    result = _on_a_loop(refused)
    assert not result.accepted and result.message.startswith("restricted: ")
    assert not _stored(community, event)


@override_settings(RELAY_GROUP_COMMIT=False)
def test_without_group_commit_a_write_goes_on_the_callers_connection_or_the_pools() -> None:
    community = make_community("loop-alone.example")
    author = make_key()
    h = make_channel(community, owner=author)
    held, pooled = _create(author, h), _create(author, h)

    async def written() -> list[IngestResult]:
        conn = await psycopg.AsyncConnection.connect(**psycopg_connect_kwargs(), autocommit=True)
        try:
            on_held = await ingest_on_loop(community=community, raw=json.dumps(held),
                                           authenticated_pubkeys=[author.pubkey], conn=conn)
            assert conn.info.transaction_status == TransactionStatus.IDLE  # left idle
        finally:
            await conn.close()
        on_pooled = await ingest_on_loop(community=community, raw=json.dumps(pooled),
                                         authenticated_pubkeys=[author.pubkey])
        return [on_held, on_pooled]

    results = _on_a_loop(written)
    assert [(r.accepted, r.message) for r in results] == [(True, "")] * 2
    assert _stored(community, held) and _stored(community, pooled)


@override_settings(RELAY_GROUP_COMMIT=True)
def test_with_group_commit_writes_join_the_loops_batcher() -> None:
    community = make_community("loop-batched.example")
    author = make_key()
    h = make_channel(community, owner=author)
    events = [_create(author, h) for _ in range(3)]

    async def written() -> tuple[list[IngestResult], int]:
        results = await asyncio.gather(*(
            ingest_on_loop(community=community, raw=json.dumps(event),
                           authenticated_pubkeys=[author.pubkey])
            for event in events
        ))
        return list(results), group_commit().batches

    results, batches = _on_a_loop(written)
    assert [(r.accepted, r.message) for r in results] == [(True, "")] * 3
    assert 1 <= batches <= 2  # the first goes alone, the others share the next batch
    assert all(_stored(community, event) for event in events)
