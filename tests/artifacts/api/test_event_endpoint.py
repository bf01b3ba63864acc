"""POST /event through the real endpoint: NIP-98 failures, body shape, limits, the OK triple."""

from __future__ import annotations

import base64
import hashlib
import time
import uuid
from typing import Any

import orjson
import psycopg
import pytest
from django.db import connection
from django.test import Client, override_settings

from artifacts.models import Community, Event
from artifacts.services.artifact_revisions import artifact_lock_key
from nostr.events import sign_event
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

# The views read through connections of their own (the edge's database threads): they see
# committed data only, so these tests commit.
pytestmark = pytest.mark.django_db(transaction=True)

URL = "http://team.example/event"


@pytest.fixture
def community(transactional_db: None) -> Community:
    return make_community()


@pytest.fixture
def alice() -> Key:
    return make_key()


def _event(community: Community, who: Key) -> dict[str, Any]:
    h = make_channel(community)
    return signed_event(who, 45010, artifact_tags(op="create", d=str(uuid.uuid4()), h=h), "{}")


def _auth(who: Key, tags: list[list[str]], *, kind: int = 27235,
          created_at: int | None = None) -> str:
    event = sign_event(who.secret, kind=kind, tags=tags, content="", created_at=created_at)
    return "Nostr " + base64.b64encode(orjson.dumps(event)).decode()


def _post(body: bytes, authorization: str | None, path: str = "/event", **extra: Any) -> Any:
    headers = {"Authorization": authorization} if authorization is not None else {}
    return Client().post(path, data=body, content_type="application/json", headers=headers,
                         HTTP_HOST="team.example", **extra)


def _tags(body: bytes, *, url: str = URL, method: str = "POST") -> list[list[str]]:
    return [["u", url], ["method", method], ["payload", hashlib.sha256(body).hexdigest()]]


def test_accepted_event_answers_the_ok_triple(community: Community, alice: Key) -> None:
    event = _event(community, alice)
    response = signed_post(Client(), "/event", alice, event)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == ["OK", event["id"], True, ""]
    assert response["Access-Control-Allow-Origin"] == "*"
    again = signed_post(Client(), "/event", alice, event)
    assert again.json() == ["OK", event["id"], True, "duplicate: already have this event"]


def test_refusals_are_200_with_ok_false(community: Community, alice: Key) -> None:
    event = _event(community, alice)
    response = signed_post(Client(), "/event", alice, {**event, "sig": "0" * 128})
    assert response.status_code == 200
    assert response.json() == ["OK", event["id"], False, "invalid: bad signature"]
    other = make_key()
    response = signed_post(Client(), "/event", other, event)  # authenticated as someone else
    assert response.json()[2:] == [False, "restricted: event author is not authenticated"]
    assert not Event.objects.exists()


def _cases(alice: Key, body: bytes) -> dict[str, str]:
    now = int(time.time())
    good = _tags(body)
    return {
        "missing header": "",
        "other host": _auth(alice, _tags(body, url="http://other.example/event")),
        "other port": _auth(alice, _tags(body, url="http://team.example:8080/event")),
        "other path": _auth(alice, _tags(body, url="http://team.example/query")),
        "other scheme": _auth(alice, _tags(body, url="https://team.example/event")),
        "wrong method": _auth(alice, _tags(body, method="GET")),
        "stale created_at": _auth(alice, good, created_at=now - 61 - 5),
        "future created_at": _auth(alice, good, created_at=now + 61 + 5),
        "bad payload hash": _auth(alice, [*good[:2], ["payload", "0" * 64]]),
        "missing payload hash": _auth(alice, good[:2]),
        "oversized header": _auth(alice, [*good, ["pad", "x" * 2100]]),
        "garbage base64": "Nostr !!!not-base64!!!",
        "wrong kind": _auth(alice, good, kind=1),
        "other scheme name": _auth(alice, good).replace("Nostr ", "Bearer "),
        "bad signature": _auth(alice, good)[:-20] + base64.b64encode(b"x" * 15).decode(),
    }


CASES = list(_cases(make_key(), b"{}"))


@pytest.mark.parametrize("case", CASES)
def test_each_nip98_failure_is_a_401_json(community: Community, alice: Key, case: str) -> None:
    event = _event(community, alice)
    body = orjson.dumps(event)
    authorization = _cases(alice, body)[case]
    response = _post(body, authorization or None)
    assert response.status_code == 401, (case, response.content)
    assert response["WWW-Authenticate"] == "Nostr"
    assert response["Access-Control-Allow-Origin"] == "*"
    payload = response.json()
    assert payload["error"] == "unauthorized" and payload["message"]
    assert not Event.objects.exists()


def test_the_query_string_is_part_of_the_signed_url(community: Community, alice: Key) -> None:
    body = orjson.dumps(_event(community, alice))
    response = _post(body, _auth(alice, _tags(body)), path="/event?via=test")
    assert response.status_code == 401
    assert "u tag" in response.json()["message"]
    response = _post(body, _auth(alice, _tags(body, url=URL + "?via=test")), path="/event?via=test")
    assert response.status_code == 200


def test_a_replayed_authorization_is_refused_and_says_so(community: Community, alice: Key) -> None:
    body = orjson.dumps(_event(community, alice))
    authorization = _auth(alice, _tags(body))
    assert _post(body, authorization).status_code == 200
    replay = _post(body, authorization)
    assert replay.status_code == 401
    assert "replay" in replay.json()["message"]


def test_lowercase_method_scheme_and_host_case_are_accepted(
    community: Community, alice: Key
) -> None:
    body = orjson.dumps(_event(community, alice))
    tags = _tags(body, url="HTTP://Team.Example:80/event", method="post")
    response = _post(body, _auth(alice, [*tags, ["nonce", "1"]]))
    assert response.status_code == 200, response.content


@override_settings(RELAY_PUBLIC_URL="https://relay.example.com")
def test_the_public_url_setting_names_scheme_and_host(alice: Key, db: None) -> None:
    community = make_community("relay.example.com")
    body = orjson.dumps(_event(community, alice))
    response = Client().post("/event", data=body, content_type="application/json",
                             headers=nip98_headers(alice, "https://relay.example.com/event",
                                                   "POST", body),
                             HTTP_HOST="10.0.0.5:8000")
    assert response.status_code == 200, response.content


@override_settings(RELAY_TRUSTED_PROXIES=("127.0.0.1/32",))
def test_forwarded_headers_count_only_from_trusted_proxies(
    community: Community, alice: Key
) -> None:
    body = orjson.dumps(_event(community, alice))
    headers = nip98_headers(alice, "https://team.example/event", "POST", body)
    forwarded: dict[str, Any] = {
        "HTTP_X_FORWARDED_PROTO": "https", "HTTP_X_FORWARDED_HOST": "team.example"
    }
    response = Client().post("/event", data=body, content_type="application/json",
                             headers=headers, HTTP_HOST="backend:8000", **forwarded)
    assert response.status_code == 200, response.content
    with override_settings(RELAY_TRUSTED_PROXIES=()):
        headers = nip98_headers(alice, "https://team.example/event", "POST", body)
        response = Client().post("/event", data=body, content_type="application/json",
                                 headers=headers, HTTP_HOST="team.example", **forwarded)
        assert response.status_code == 401


@pytest.mark.parametrize("body", [b"[1,2]", b"not json", b"\"event\"", b""])
def test_a_body_that_is_not_an_event_object_is_400(
    community: Community, alice: Key, body: bytes
) -> None:
    response = signed_post(Client(), "/event", alice, body)
    assert response.status_code == 400, response.content
    assert response.json()["error"] == "invalid_event"


def test_authentication_comes_before_the_body_shape(community: Community) -> None:
    response = _post(b"not json", None)
    assert response.status_code == 401


def test_per_pubkey_limit_answers_429_with_retry_after(community: Community, alice: Key) -> None:
    with override_settings(RELAY_RATE_LIMIT_PUBKEY_RATE=0.01, RELAY_RATE_LIMIT_PUBKEY_BURST=2):
        answers = [signed_post(Client(), "/event", alice, _event(community, alice)).status_code
                   for _ in range(3)]
        response = signed_post(Client(), "/event", alice, _event(community, alice))
    assert answers == [200, 200, 429]
    assert response.status_code == 429
    assert response.json()["error"] == "rate_limited"
    assert 1 <= int(response["Retry-After"]) <= 100
    # Another pubkey is not limited by alice's bucket.
    other = make_key()
    assert signed_post(Client(), "/event", other, _event(community, other)).status_code == 200


def test_address_limit_applies_before_any_signature_is_checked(community: Community) -> None:
    address = f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.7"
    with override_settings(RELAY_RATE_LIMIT_ADDRESS_RATE=0.01, RELAY_RATE_LIMIT_ADDRESS_BURST=1):
        first = _post(b"{}", "Nostr garbage", REMOTE_ADDR=address)
        second = _post(b"{}", "Nostr garbage", REMOTE_ADDR=address)
    assert first.status_code == 401
    assert second.status_code == 429 and second["Retry-After"]


def test_get_is_405(community: Community) -> None:
    response = Client().get("/event", HTTP_HOST="team.example")
    assert response.status_code == 405
    assert response.json()["error"] == "method_not_allowed"


def _conninfo() -> str:
    db = connection.settings_dict
    return psycopg.conninfo.make_conninfo(
        dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"] or None,
        host=db["HOST"] or None, port=db["PORT"] or None,
    )


@pytest.mark.django_db(transaction=True)
def test_a_write_stuck_on_a_lock_answers_503_budget_exceeded(alice: Key) -> None:
    # Committed data (transaction=True): the create's own advisory lock is released.
    community = make_community()
    h = make_channel(community)
    d, head = create_artifact(community, alice, h)
    update = signed_event(alice, 45010, artifact_tags(op="update", d=d, h=h, prev=head), "{}")
    with psycopg.connect(_conninfo(), autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", [artifact_lock_key(community.pk,
                                                                         uuid.UUID(d))])
        started = time.monotonic()
        response = signed_post(Client(), "/event", alice, update)
        waited = time.monotonic() - started
    assert response.status_code == 503
    assert response.json()["error"] == "budget_exceeded"
    assert response["Retry-After"]
    assert 2.5 < waited < 10
