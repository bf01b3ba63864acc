"""POST /query through the real endpoint: the order of checks, both modes, budgets."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from django.db import connection
from django.test import Client

from artifacts.models import Community
from relayinfo.readiness import deployment_ready, forget_cached_readiness
from tests.artifacts.selectors.held import HeldTransaction
from tests.factories import (
    Key,
    artifact_tags,
    create_artifact,
    make_channel,
    make_community,
    make_key,
    nip98_headers,
    signed_event,
    signed_post,
)

pytestmark = pytest.mark.django_db(transaction=True)
HOST = "team.example"


@pytest.fixture
def community() -> Community:
    return make_community(HOST)


@pytest.fixture
def alice() -> Key:
    return make_key()


def post(who: Key | None, body: Any, **extra: Any) -> Any:
    if who is not None:
        return signed_post(Client(), "/query", who, body, host=HOST)
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    return Client().post("/query", data=data, content_type="application/json",
                         HTTP_HOST=HOST, **extra)


def incremental(who: Key, progress: str | None, **fields: Any) -> dict[str, Any]:
    forget_cached_readiness()
    response = post(who, [{"artifact": "current", "progress": progress, **fields}])
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    assert response["Access-Control-Allow-Origin"] == "*"
    page = dict(orjson.loads(response.content))
    assert list(page) == ["events", "removed", "progress", "more", "reset"]
    return page


def test_plain_read_answers_the_stored_events(community: Community, alice: Key) -> None:
    h = make_channel(community, owner=alice)
    d = "0f" * 4 + "-0000-4000-8000-" + "0" * 12
    tags = artifact_tags(op="create", d=d, h=h, title="spaced")
    stored = signed_event(alice, 45010, tags, '{"a": 1}')
    raw = orjson.dumps(stored, option=orjson.OPT_INDENT_2)  # not the compact form
    accepted = signed_post(Client(), "/event", alice, raw, host=HOST)
    assert accepted.json()[2] is True, accepted.json()
    response = post(alice, [{"artifact": "current"}])
    assert response.status_code == 200
    # Byte for byte as stored: the relay does not parse and re-serialize events.
    assert response.content == b"[" + raw + b"]"


def test_incremental_rounds_over_http_deliver_a_write_made_over_http(
    community: Community, alice: Key
) -> None:
    h = make_channel(community, owner=alice)
    d, head = create_artifact(community, alice, h)
    create_artifact(community, alice, h)
    first = incremental(alice, None, limit=1)
    assert first["reset"] is True and first["more"] is True and len(first["events"]) == 1
    page = first
    while page["more"]:
        page = incremental(alice, page["progress"], limit=1)
    update = signed_event(alice, 45010, artifact_tags(op="update", d=d, h=h, prev=head), "{}")
    accepted = signed_post(Client(), "/event", alice, update, host=HOST).json()
    assert accepted[:3] == ["OK", update["id"], True]
    page = incremental(alice, page["progress"])
    # The overlap (120 s) repeats earlier changes: duplicates are allowed, applied by `d`.
    heads = {tag_value(e, "d"): e["id"] for e in page["events"]}
    assert heads[d] == update["id"]
    assert page["reset"] is False and page["removed"] == [] and page["more"] is False


def tag_value(event: dict[str, Any], name: str) -> str:
    return next(t[1] for t in event["tags"] if t[0] == name)


def test_order_of_checks(community: Community, alice: Key, settings: Any) -> None:
    # No authentication: 401 whatever the body.
    response = post(None, b"not json at all")
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Nostr"
    assert response.json()["error"] == "unauthorized"
    # Authenticated, bad shape: 400 even when the pubkey is over its limit.
    settings.RELAY_RATE_LIMIT_PUBKEY_RATE = 0.001
    settings.RELAY_RATE_LIMIT_PUBKEY_BURST = 1
    assert post(alice, [{"artifact": "current"}]).status_code == 200
    response = post(alice, [{"artifact": "current", "limit": 0}])
    assert response.status_code == 400 and response.json()["error"] == "invalid_filter"
    response = post(alice, [{"artifact": "current", "progress": "garbage"}])
    assert response.status_code == 400 and response.json()["error"] == "invalid_progress"
    # Good shape, over the limit: 429 with Retry-After.
    response = post(alice, [{"artifact": "current"}])
    assert response.status_code == 429 and response.json()["error"] == "rate_limited"
    assert int(response["Retry-After"]) >= 1


def test_oversized_body_is_413_before_anything_else(community: Community, alice: Key) -> None:
    body = orjson.dumps([{"artifact": "current", "#t": ["x" * 70_000]}])
    response = post(None, body, **nip98_headers(alice, f"http://{HOST}/query", "POST", body))
    assert response.status_code == 413
    assert response.json()["error"] == "payload_too_large"


def test_unknown_host_is_404_and_preflight_needs_no_auth(community: Community) -> None:
    response = Client().post("/query", data=b"[]", content_type="application/json",
                             HTTP_HOST="elsewhere.example")
    assert response.status_code == 404 and response.json()["error"] == "unknown_community"
    response = Client().options("/query", HTTP_HOST=HOST)
    assert response.status_code == 204
    assert "Authorization" in response["Access-Control-Allow-Headers"]


@pytest.mark.parametrize(
    "body",
    [
        b"{}",
        b"[]",
        b'[{"artifact": "current"}, {"artifact": "current"}]',
        b'[{"artifact": "current", "authors": []}]',
        b'[{"artifact": "current", "limit": 1001}]',
        b'[{"artifact": "history"}]',
        b'[{"artifact": "current", "progress": null, "offset": 1}]',
        b'[{"artifact": "current", "progress": null, "#d": ["x"]}]',
    ],
)
def test_malformed_filters_are_400(community: Community, alice: Key, body: bytes) -> None:
    response = post(alice, body)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_filter" and response.json()["message"]


def test_foreign_and_tampered_tokens_are_400(community: Community, alice: Key) -> None:
    bob = make_key()
    h = make_channel(community, owner=alice)
    create_artifact(community, alice, h)
    token = incremental(alice, None)["progress"]
    tampered = token[:10] + ("A" if token[10] != "A" else "B") + token[11:]
    for who, fields in (
        (alice, {"progress": tampered}),
        (bob, {"progress": token}),
        (alice, {"progress": token, "#h": [h]}),
        (alice, {"progress": token + "A"}),
    ):
        response = post(who, [{"artifact": "current", **fields}])
        assert response.status_code == 400, fields
        assert response.json()["error"] == "invalid_progress"
    # The limit is not part of the token's binding.
    assert incremental(alice, token, limit=3)["reset"] is False


@pytest.mark.parametrize("mode", ["plain", "incremental"])
def test_statement_timeout_is_a_503_json(community: Community, alice: Key, mode: str) -> None:
    h = make_channel(community, owner=alice)
    create_artifact(community, alice, h)
    body: dict[str, Any] = {"artifact": "current"}
    if mode == "incremental":
        body["progress"] = None
    # The readiness verdict is cached a few seconds: evaluate it before the lock (its catalog
    # queries would wait for the lock too).
    forget_cached_readiness()
    deployment_ready()
    # A migration-like lock holds the heads table: the read waits past its 2 s budget.
    locker = HeldTransaction()
    locker.run(lambda: connection.cursor().execute(
        "LOCK TABLE artifact_heads IN ACCESS EXCLUSIVE MODE"))
    try:
        started = time.monotonic()
        response = post(alice, [body])
        elapsed = time.monotonic() - started
    finally:
        locker.rollback()
    assert response.status_code == 503
    assert response.json()["error"] == "budget_exceeded"
    assert response["Retry-After"]
    assert 1.9 <= elapsed < 10


def test_incremental_view_changes_over_http(community: Community, alice: Key) -> None:
    """`view_changes: "incremental"`: a lost channel comes as `removed_channels` (between
    `removed` and `progress`, only when not empty), a gained one without a reset; here the
    reader's only channel, so its view is empty in between."""
    bob = make_key()
    h = make_channel(community, owner=alice, visibility="private", members=[bob])
    create_artifact(community, alice, h)
    opted = {"view_changes": "incremental"}
    page = incremental(bob, None, **opted)
    assert page["reset"] is True and len(page["events"]) == 1 and not page["more"]
    removal = signed_event(alice, 9001, [["h", h], ["p", bob.pubkey]])
    assert signed_post(Client(), "/event", alice, removal, host=HOST).json()[2] is True
    forget_cached_readiness()
    response = post(bob, [{"artifact": "current", "progress": page["progress"], **opted}])
    lost = orjson.loads(response.content)
    assert list(lost) == ["events", "removed", "removed_channels", "progress", "more", "reset"]
    assert lost["removed_channels"] == [h] and lost["reset"] is False and lost["events"] == []
    grant = signed_event(alice, 9000, [["h", h], ["p", bob.pubkey]])
    assert signed_post(Client(), "/event", alice, grant, host=HOST).json()[2] is True
    regained = incremental(bob, lost["progress"], **opted)
    assert regained["reset"] is False and len(regained["events"]) == 1
    response = post(bob, [{"artifact": "current", "progress": None, "view_changes": "all"}])
    assert response.status_code == 400 and response.json()["error"] == "invalid_filter"
