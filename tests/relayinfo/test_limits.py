"""Every NIP-11 `limitation` value enforced over HTTP is the one announced: read the document,
then hold the relay to it (at the limit: accepted; one past it: refused). Run once with the
shipped settings and once with other values, which shows the document and the enforcing code
share one setting. The WebSocket limits (max_message_length, max_subscriptions,
max_subid_length, REQ limit) are held by tests/artifacts/ws/test_limits_server.py.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from django.test import Client, override_settings

from artifacts.models import Community
from nostr.events import EventLimits
from tests.factories import (
    Key,
    artifact_tags,
    make_channel,
    make_community,
    make_key,
    signed_event,
    signed_post,
)
from tests.relayinfo.conftest import HOST, NOSTR_JSON, transactional

# Reads run in a transaction of their own, so these tests cannot be wrapped in one.
pytestmark = transactional

SMALL = {
    "RELAY_EVENT_LIMITS": EventLimits(max_tags=20, created_at_lower=3600, created_at_upper=120),
    "RELAY_MAX_LIMIT": 10,
}


@pytest.fixture(params=["shipped", "small"])
def limitation(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    overrides = {} if request.param == "shipped" else SMALL
    with override_settings(**overrides):
        make_community(HOST)
        response = Client().get("/", HTTP_HOST=HOST, HTTP_ACCEPT=NOSTR_JSON)
        yield dict(response.json()["limitation"])


@pytest.fixture
def alice() -> Key:
    return make_key()


def post_artifact(alice: Key, *, tags_total: int = 6, created_at: int | None = None) -> list[Any]:
    community = Community.objects.get(host=HOST)
    h = make_channel(community)
    tags = artifact_tags(op="create", d=str(uuid.uuid4()), h=h)
    tags += [["t", f"tag{i}"] for i in range(tags_total - len(tags))]
    event = signed_event(alice, 45010, tags, "{}", created_at=created_at)
    response = signed_post(Client(), "/event", alice, event, host=HOST)
    assert response.status_code == 200, response.content
    return list(response.json())


def test_max_event_tags(limitation: dict[str, Any], alice: Key) -> None:
    most = limitation["max_event_tags"]
    assert post_artifact(alice, tags_total=most)[2] is True
    refused = post_artifact(alice, tags_total=most + 1)
    assert refused[2] is False and refused[3].startswith("invalid: ")
    assert "tags" in refused[3]


def test_created_at_lower_limit(limitation: dict[str, Any], alice: Key) -> None:
    oldest = int(time.time()) - limitation["created_at_lower_limit"]
    assert post_artifact(alice, created_at=oldest + 60)[2] is True
    refused = post_artifact(alice, created_at=oldest - 60)
    assert refused[2] is False and refused[3].startswith("invalid: ")


def test_created_at_upper_limit(limitation: dict[str, Any], alice: Key) -> None:
    newest = int(time.time()) + limitation["created_at_upper_limit"]
    assert post_artifact(alice, created_at=newest - 60)[2] is True
    refused = post_artifact(alice, created_at=newest + 60)
    assert refused[2] is False and refused[3].startswith("invalid: ")


@pytest.mark.parametrize("mode", ["plain", "incremental"])
def test_max_limit_of_query(limitation: dict[str, Any], alice: Key, mode: str) -> None:
    most = limitation["max_limit"]

    def query(limit: int) -> Any:
        body: dict[str, Any] = {"artifact": "current", "limit": limit}
        if mode == "incremental":
            body["progress"] = None
        return signed_post(Client(), "/query", alice, orjson.dumps([body]), host=HOST)

    assert query(most).status_code == 200
    refused = query(most + 1)
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_filter"
