"""The reference's HTTP test, and what readiness does to rounds: capability discovery through
NIP-11, then incremental queries at the advertised endpoint; continuation rounds reset while the
deployment is not ready, and across a non-stamping writer's whole stay."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from django.test import Client

from artifacts.models import Community
from artifacts.schema import INDEXES_BY_NAME
from relayinfo.readiness import forget_cached_readiness
from tests.factories import (
    Key,
    create_artifact,
    make_channel,
    make_community,
    make_key,
    signed_post,
)
from tests.relayinfo.conftest import (
    NOSTR_JSON,
    connect,
    execute,
    fresh,
    transactional,
    wait_for,
)

pytestmark = transactional
HOST = "team.example"


@pytest.fixture
def alice() -> Key:
    return make_key()


@pytest.fixture
def seeded(alice: Key) -> tuple[Community, str]:
    community = make_community(HOST)
    h = make_channel(community, owner=alice)
    d, _head = create_artifact(community, alice, h, title="first")
    return community, d


def discover() -> dict[str, Any]:
    forget_cached_readiness()
    response = Client().get("/", HTTP_HOST=HOST, HTTP_ACCEPT=NOSTR_JSON)
    assert response.status_code == 200 and response["Content-Type"] == NOSTR_JSON
    return dict(response.json())


def query(who: Key, endpoint: str, progress: str | None, limit: int = 100) -> dict[str, Any]:
    forget_cached_readiness()
    body = [{"artifact": "current", "progress": progress, "limit": limit}]
    response = signed_post(Client(), endpoint, who, body, host=HOST)
    assert response.status_code == 200, response.content
    return dict(orjson.loads(response.content))


def finish_round(who: Key, endpoint: str, progress: str | None) -> tuple[dict[str, Any], str]:
    """Pages until `more: false`; returns (first page, token of the last page)."""
    first = page = query(who, endpoint, progress)
    while page["more"]:
        page = query(who, endpoint, page["progress"])
    return first, page["progress"]


def test_capability_discovery_then_a_successful_incremental_query(
    seeded: tuple[Community, str], alice: Key
) -> None:
    _community, d = seeded
    document = discover()
    assert "artifacts.incremental" in document["supported_extensions"]
    incremental = document["artifacts"]["incremental"]
    first, token = finish_round(alice, incremental["endpoint"], None)
    assert first["reset"] is True
    assert [tag[1] for e in first["events"] for tag in e["tags"] if tag[0] == "d"] == [d]
    assert first["removed"] == []
    # The next round continues: no reset.
    again, _ = finish_round(alice, incremental["endpoint"], token)
    assert again["reset"] is False


def test_dropped_index_resets_continuation_rounds_until_rebuilt(
    seeded: tuple[Community, str], alice: Key
) -> None:
    endpoint = discover()["artifacts"]["incremental"]["endpoint"]
    _, token = finish_round(alice, endpoint, None)
    spec = INDEXES_BY_NAME["artifact_heads_modified"]
    execute(spec.drop_sql(concurrently=False))
    try:
        assert "artifacts.incremental" not in discover()["supported_extensions"]
        page, token = finish_round(alice, endpoint, token)
        assert page["reset"] is True  # not ready: every round is a full round
    finally:
        execute(spec.create_sql(concurrently=False))
    assert "artifacts.incremental" in discover()["supported_extensions"]
    page, _ = finish_round(alice, endpoint, token)
    assert page["reset"] is False


def test_tokens_never_continue_across_a_non_stamping_writers_stay(
    seeded: tuple[Community, str], alice: Key
) -> None:
    endpoint = discover()["artifacts"]["incremental"]["endpoint"]
    _, before = finish_round(alice, endpoint, None)

    legacy = connect(application_name="buzzrelay/0.0.9 key=" + discover()["pubkey"][:8])
    try:
        # The fleet refresher notices it (every 10 s in a serving process; here by hand).
        fresh()
        assert "artifacts.incremental" not in discover()["supported_extensions"]
        page, during = finish_round(alice, endpoint, before)
        assert page["reset"] is True
    finally:
        pid = legacy.info.backend_pid
        legacy.close()

    def left() -> bool:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
            return cursor.fetchone()[0] == 0

    assert wait_for(left)
    fresh()
    assert "artifacts.incremental" in discover()["supported_extensions"]
    # The token from a round run while that writer could still change data (unstamped) must not
    # continue: the epoch moved again when it left.
    page, after = finish_round(alice, endpoint, during)
    assert page["reset"] is True
    page, _ = finish_round(alice, endpoint, after)
    assert page["reset"] is False
