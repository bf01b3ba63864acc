"""NIP-98 as the DRF authentication class: the public URL, replay claims in Redis and in
PostgreSQL. The class is a coroutine; these tests drive it from sync code with async_to_sync."""

from __future__ import annotations

import base64
import time
import uuid
from datetime import UTC, datetime

import orjson
import pytest
from asgiref.sync import async_to_sync
from django.test import RequestFactory, override_settings
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from relaycore.edge import nip98
from relaycore.edge.exceptions import relay_exception_handler
from relaycore.edge.nip98 import REPLAY_MESSAGE, Nip98Authentication
from relaycore.edge.nip98 import claim_auth_event as claim_async
from relaycore.edge.parsers import BoundedBytesParser
from relayinfo.models import AuthReplayClaim
from tests.factories import make_key, nip98_header

UNREACHABLE_REDIS = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        # Nothing listens on port 1: a real Redis that is down, not a mock.
        "LOCATION": "redis://127.0.0.1:1/0",
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5},
    }
}


def _request(authorization: str, body: bytes = b'{"x":1}', path: str = "/event") -> object:
    return RequestFactory().post(
        path, data=body, content_type="application/json", HTTP_HOST="team.example",
        HTTP_AUTHORIZATION=authorization,
    )


def authenticate_request(request: object) -> str:
    """The pubkey the class authenticates (raises DRF's AuthenticationFailed)."""
    drf_request = Request(request, parsers=[BoundedBytesParser()])  # type: ignore[arg-type]
    user, _auth = async_to_sync(Nip98Authentication().authenticate_async)(drf_request)
    return str(user.pubkey)


def claim_auth_event(event_id: str, *, expires_at: int) -> bool:
    return bool(async_to_sync(claim_async)(event_id, expires_at=expires_at))


def _event_id(header: str) -> str:
    return str(orjson.loads(base64.b64decode(header.split()[1]))["id"])


def _signed(body: bytes = b'{"x":1}') -> tuple[str, str]:
    key = make_key()
    return key.pubkey, nip98_header(key, "http://team.example/event", "POST", body)


@pytest.mark.django_db(transaction=True)
def test_a_valid_header_authenticates_its_signer_once() -> None:
    pubkey, header = _signed()
    assert authenticate_request(_request(header)) == pubkey  # type: ignore[arg-type]
    with pytest.raises(AuthenticationFailed) as refused:
        authenticate_request(_request(header))  # type: ignore[arg-type]
    assert refused.value.detail == REPLAY_MESSAGE
    assert "replay" in REPLAY_MESSAGE and "nonce" in REPLAY_MESSAGE


@pytest.mark.django_db(transaction=True)
def test_the_body_must_match_the_payload_tag() -> None:
    _, header = _signed(b'{"x":1}')
    with pytest.raises(AuthenticationFailed, match="payload"):
        authenticate_request(_request(header, body=b'{"x":2}'))  # type: ignore[arg-type]


@pytest.mark.django_db(transaction=True)
def test_claims_in_redis_do_not_touch_postgresql() -> None:
    AuthReplayClaim.objects.all().delete()
    event_id = uuid.uuid4().hex * 2
    assert claim_auth_event(event_id, expires_at=int(time.time()) + 60)
    assert not claim_auth_event(event_id, expires_at=int(time.time()) + 60)
    assert not AuthReplayClaim.objects.filter(event_id=event_id).exists()


@pytest.mark.django_db(transaction=True)
def test_replay_is_refused_while_redis_is_unavailable_and_after_it_returns() -> None:
    pubkey, header = _signed()
    with override_settings(CACHES=UNREACHABLE_REDIS):
        started = time.monotonic()
        assert authenticate_request(_request(header)) == pubkey  # type: ignore[arg-type]
        with pytest.raises(AuthenticationFailed, match="replay"):
            authenticate_request(_request(header))  # type: ignore[arg-type]
        # The breaker stops paying the connect timeout on every request.
        for _ in range(20):
            _, other = _signed()
            authenticate_request(_request(other))  # type: ignore[arg-type]
        assert time.monotonic() - started < 3
    claim = AuthReplayClaim.objects.get(event_id=_event_id(header))
    assert claim.expires_at.timestamp() > time.time() + 60
    # Redis is back: an id claimed in PostgreSQL during the outage is still refused.
    with pytest.raises(AuthenticationFailed, match="replay"):
        authenticate_request(_request(header))  # type: ignore[arg-type]


@pytest.mark.django_db(transaction=True)
def test_claims_are_copied_to_postgresql_only_while_a_claim_made_without_redis_lives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    AuthReplayClaim.objects.all().delete()
    monkeypatch.setattr(nip98, "_postgres_live_until", 0.0)
    monkeypatch.setattr(nip98, "_postgres_checked_at", -1.0e9)
    # Another instance, its Redis out, claimed an id here; it expires in two seconds.
    outage_id = uuid.uuid4().hex * 2
    AuthReplayClaim.objects.create(
        event_id=outage_id, expires_at=datetime.fromtimestamp(time.time() + 2, UTC))
    # This instance's Redis is up: that id is still refused, and a new claim is copied here.
    assert not claim_auth_event(outage_id, expires_at=int(time.time()) + 60)
    copied = uuid.uuid4().hex * 2
    assert claim_auth_event(copied, expires_at=int(time.time()) + 60)
    assert AuthReplayClaim.objects.get(event_id=copied).mirror
    # Once the claim made without Redis has expired, claims stay in Redis alone, though the
    # copy is still live: a copy does not keep the copying on.
    time.sleep(2.2)
    later = uuid.uuid4().hex * 2
    assert claim_auth_event(later, expires_at=int(time.time()) + 60)
    assert not AuthReplayClaim.objects.filter(event_id=later).exists()
    assert not claim_auth_event(later, expires_at=int(time.time()) + 60)


@pytest.mark.django_db(transaction=True)
@override_settings(CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}})
def test_without_redis_claims_go_to_postgresql_which_every_instance_shares() -> None:
    pubkey, header = _signed()
    assert authenticate_request(_request(header)) == pubkey  # type: ignore[arg-type]
    assert AuthReplayClaim.objects.count() >= 1
    with pytest.raises(AuthenticationFailed, match="replay"):
        authenticate_request(_request(header))  # type: ignore[arg-type]


@pytest.mark.django_db(transaction=True)
@override_settings(CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}})
def test_an_expired_postgresql_claim_can_be_taken_again() -> None:
    event_id = "e" * 64
    long_ago = int(time.time()) - 3600
    assert claim_auth_event(event_id, expires_at=long_ago)
    assert claim_auth_event(event_id, expires_at=long_ago)
    assert claim_auth_event(event_id, expires_at=int(time.time()) + 60)
    assert not claim_auth_event(event_id, expires_at=int(time.time()) + 60)


def test_unauthorized_response_shape() -> None:
    response = relay_exception_handler(AuthenticationFailed("auth event has no u tag"), {})
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Nostr"
    assert response.content == b'{"error":"unauthorized","message":"auth event has no u tag"}'


@pytest.mark.django_db(transaction=True)
def test_claims_asked_in_one_turn_share_a_round_trip_and_keep_one_winner_per_id() -> None:
    """Claims asked together go to Redis as one pipeline: each fresh id is claimed once, and of
    two claims of one id in the same pipeline exactly one wins."""
    import asyncio

    ids = [uuid.uuid4().hex * 2 for _ in range(4)]
    expires_at = int(time.time()) + 60

    async def together() -> list[bool]:
        return list(await asyncio.gather(*(
            claim_async(event_id, expires_at=expires_at) for event_id in [*ids, ids[1]]
        )))

    answers = async_to_sync(together)()
    assert answers == [True, True, True, True, False]  # Redis runs them in the asked order
    assert async_to_sync(together)() == [False] * 5  # all claimed by now
