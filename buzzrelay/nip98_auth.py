"""NIP-98 authentication of HTTP requests (PROTOCOL.md section 3), for every relay endpoint.

`nostr.nip98` checks the header against the request's public URL, method and body; this module
adds what needs shared state: each auth event id is accepted once within its window. The claim
goes to Redis (SET NX EX: shared by every instance); while Redis is unavailable, to PostgreSQL
(`auth_replay_claims`). Claims made in PostgreSQL stay authoritative until they expire: as long
as any is live, a Redis claim is also made there, so an event claimed during an outage cannot
be replayed once Redis is back.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.db import connection
from django.http import HttpRequest, HttpResponse
from redis.exceptions import RedisError

from buzzrelay.http import absolute_url, json_error
from buzzrelay.ratelimit import RedisUnavailable, mark_redis_down, redis_client
from nostr.nip98 import Nip98Error, verify_nip98
from relayinfo.metrics import record_nip98_check

__all__ = [
    "REPLAY_MESSAGE",
    "AuthenticationFailed",
    "authenticate_request",
    "claim_auth_event",
    "unauthorized_response",
]

WINDOW_SECONDS = 60
# Instances' clocks differ a little: another instance may still accept the event this long
# after this one stopped, so the claim outlives the window by this margin.
CLOCK_SKEW_MARGIN = 30
CLAIM_PREFIX = "buzz:nip98:"
REPLAY_MESSAGE = (
    "auth event already used (replay): sign a new auth event for every request,"
    " e.g. with a random nonce tag"
)


class AuthenticationFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def authenticate_request(request: HttpRequest) -> str:
    """The pubkey that signed the request's `Authorization: Nostr ...`; raises
    `AuthenticationFailed` with the reason for the 401 body."""
    now = int(time.time())
    record_nip98_check()
    try:
        auth = verify_nip98(
            request.headers.get("Authorization"),
            url=absolute_url(request),
            method=request.method or "",
            body=request.body or None,
            now=now,
            window=WINDOW_SECONDS,
        )
    except Nip98Error as exc:
        raise AuthenticationFailed(str(exc)) from None
    if not claim_auth_event(auth.event_id, expires_at=auth.created_at + WINDOW_SECONDS):
        raise AuthenticationFailed(REPLAY_MESSAGE)
    return auth.pubkey


def unauthorized_response(reason: str) -> HttpResponse:
    return json_error(401, "unauthorized", reason, headers={"WWW-Authenticate": "Nostr"})


def claim_auth_event(event_id: str, *, expires_at: int) -> bool:
    """Claim `event_id` until `expires_at` (Unix seconds, plus the skew margin); False if it
    was already claimed."""
    expires_at, ttl = _claim_lifetime(expires_at)
    client = redis_client()
    if client is not None:
        try:
            fresh = client.set(CLAIM_PREFIX + event_id, b"1", nx=True, ex=ttl)
        except (RedisError, OSError):
            mark_redis_down()
        else:
            if not fresh:
                return False
            if not _postgres_claims_live():
                return True
    return _claim_in_postgres(event_id, expires_at)


_lock = threading.Lock()
_postgres_live_until = 0.0  # latest expiry of a PostgreSQL claim, as last seen
_postgres_checked_at = -1.0e9
_last_prune = -1.0e9


def _claim_lifetime(expires_at: int) -> tuple[int, int]:
    """(the claim's expiry with the skew margin, seconds from now until then, at least 1)."""
    expires_at += CLOCK_SKEW_MARGIN
    return expires_at, max(1, expires_at - int(time.time()))


def postgres_claims_known_absent() -> bool:
    """PostgreSQL was checked within the last second and holds no live claim: a Redis claim
    alone is then the whole claim (what `claim_auth_event` would do)."""
    return time.monotonic() - _postgres_checked_at < 1.0 and _postgres_live_until <= time.time()


async def claim_in_redis_async(client: Any, event_id: str, *, expires_at: int) -> bool:
    """`claim_auth_event` through an asyncio Redis client, for when PostgreSQL is known to hold
    no live claim; raises `RedisUnavailable` (nothing was claimed) instead of falling back."""
    _expires_at, ttl = _claim_lifetime(expires_at)
    try:
        fresh = await client.set(CLAIM_PREFIX + event_id, b"1", nx=True, ex=ttl)
    except (RedisError, OSError) as exc:
        mark_redis_down()
        raise RedisUnavailable from exc
    return bool(fresh)


def _postgres_claims_live() -> bool:
    """Whether PostgreSQL may hold unexpired claims (asked at most once a second)."""
    global _postgres_live_until, _postgres_checked_at
    now = time.monotonic()
    if now - _postgres_checked_at >= 1.0:
        with connection.cursor() as cursor:
            cursor.execute("SELECT extract(epoch FROM max(expires_at)) FROM auth_replay_claims")
            row = cursor.fetchone()
        latest = float(row[0]) if row and row[0] is not None else 0.0
        with _lock:
            _postgres_checked_at = now
            _postgres_live_until = max(_postgres_live_until, latest)
    return _postgres_live_until > time.time()


def _claim_in_postgres(event_id: str, expires_at: int) -> bool:
    global _postgres_live_until, _last_prune
    with connection.cursor() as cursor:
        # An expired claim of the same id may be taken again (its event is stale by then).
        cursor.execute(
            "INSERT INTO auth_replay_claims (event_id, expires_at) VALUES (%s, to_timestamp(%s))"
            " ON CONFLICT (event_id) DO UPDATE SET expires_at = EXCLUDED.expires_at"
            " WHERE auth_replay_claims.expires_at < now() RETURNING 1",
            [event_id, expires_at],
        )
        fresh = cursor.fetchone() is not None
        now = time.monotonic()
        if now - _last_prune > 30:
            _last_prune = now
            cursor.execute("DELETE FROM auth_replay_claims WHERE expires_at < now()")
    with _lock:
        _postgres_live_until = max(_postgres_live_until, float(expires_at))
    return fresh
