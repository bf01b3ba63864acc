"""NIP-98 at the relay's edge (PROTOCOL.md section 3), in one place: the DRF authentication
class, and the replay claims that accept each auth event id once.

`nostr.nip98` checks the header against the request's public URL, method and body;
`Nip98Authentication` calls it, then claims the event id, which needs shared state. The claim
goes to Redis (SET NX EX: shared by every instance); while Redis is unavailable, to PostgreSQL
(`auth_replay_claims`). Claims made in PostgreSQL stay
authoritative until they expire: as long as any is live, a Redis claim is also made there, so an
event claimed during an outage cannot be replayed once Redis is back, nor by an instance whose
Redis is still out. Those copies are marked (`mirror`) and do not count as live: copying ends once
the last claim made without Redis expires, however busy the relay.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.db import connection
from redis.exceptions import RedisError
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from nostr.nip98 import Nip98Auth, Nip98Error, verify_nip98
from relaycore.dbthreads import run_db
from relaycore.edge.parsers import request_body
from relaycore.http import absolute_url
from relaycore.metrics import record_nip98_check
from relaycore.redis_clients import RedisUnavailable, mark_redis_down, pipelined_redis

__all__ = [
    "CLAIM_PREFIX",
    "REPLAY_MESSAGE",
    "WINDOW_SECONDS",
    "Nip98Authentication",
    "NostrUser",
    "claim_auth_event",
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


async def claim_auth_event(event_id: str, *, expires_at: int) -> bool:
    """Claim `event_id` until `expires_at` (Unix seconds, plus the skew margin); False if it
    was already claimed."""
    expires_at += CLOCK_SKEW_MARGIN
    ttl = max(1, expires_at - int(time.time()))
    try:
        # The lean client (relaycore.redis_pipe): claims asked in one loop turn go out in one
        # write, and Redis runs them in order, so two claims of one id get one winner.
        fresh = await pipelined_redis().set_nx(CLAIM_PREFIX + event_id, b"1", ex=ttl)
    except RedisUnavailable:
        pass
    except (RedisError, OSError):
        mark_redis_down()
    else:
        if not fresh:
            return False
        if not await _postgres_claims_live():
            return True
        return await run_db(_claim_in_postgres, event_id, expires_at, mirror=True)
    return await run_db(_claim_in_postgres, event_id, expires_at, mirror=False)


_lock = threading.Lock()
_postgres_live_until = 0.0  # latest expiry of a PostgreSQL claim, as last seen
_postgres_checked_at = -1.0e9
_last_prune = -1.0e9


async def _postgres_claims_live() -> bool:
    """Whether PostgreSQL may hold unexpired claims made without Redis (asked at most once a
    second)."""
    global _postgres_live_until, _postgres_checked_at
    now = time.monotonic()
    if now - _postgres_checked_at >= 1.0:
        latest = await run_db(_latest_postgres_claim)
        with _lock:
            _postgres_checked_at = now
            _postgres_live_until = max(_postgres_live_until, latest)
    return _postgres_live_until > time.time()


def _latest_postgres_claim() -> float:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM max(expires_at)) FROM auth_replay_claims"
                       " WHERE NOT mirror")
        row = cursor.fetchone()
    return float(row[0]) if row and row[0] is not None else 0.0


def _claim_in_postgres(event_id: str, expires_at: int, *, mirror: bool) -> bool:
    """Claim `event_id` in PostgreSQL; `mirror`: it is claimed in Redis too. Only a claim made
    without Redis keeps `_postgres_claims_live` true: were the copies to count, each would keep
    the next one coming, and a relay that ever lost Redis would write every claim here for as
    long as requests came within the window of one another."""
    global _postgres_live_until, _last_prune
    with connection.cursor() as cursor:
        # An expired claim of the same id may be taken again (its event is stale by then).
        cursor.execute(
            "INSERT INTO auth_replay_claims (event_id, expires_at, mirror)"
            " VALUES (%s, to_timestamp(%s), %s)"
            " ON CONFLICT (event_id) DO UPDATE SET expires_at = EXCLUDED.expires_at,"
            " mirror = EXCLUDED.mirror"
            " WHERE auth_replay_claims.expires_at < now() RETURNING 1",
            [event_id, expires_at, mirror],
        )
        fresh = cursor.fetchone() is not None
        now = time.monotonic()
        if now - _last_prune > 30:
            _last_prune = now
            cursor.execute("DELETE FROM auth_replay_claims WHERE expires_at < now()")
    if not mirror:
        with _lock:
            _postgres_live_until = max(_postgres_live_until, float(expires_at))
    return fresh


class NostrUser:
    """`request.user` of a request signed with NIP-98: the pubkey, never a Django account."""

    is_authenticated = True
    is_anonymous = False

    def __init__(self, pubkey: str) -> None:
        self.pubkey = pubkey

    def __str__(self) -> str:
        return self.pubkey


class Nip98Authentication(BaseAuthentication):
    """`Authorization: Nostr <base64 event>` signed for this URL, method and body, used once.

    It authenticates on the event loop (`authenticate_async`, awaited by `RelayAPIView`), where
    the replay claim is one Redis round trip; DRF's synchronous `authenticate` refuses to run.
    """

    def authenticate(self, request: Request) -> tuple[NostrUser, Nip98Auth] | None:
        raise RuntimeError("NIP-98 authenticates on the event loop: RelayAPIView awaits "
                           "authenticate_async")

    async def authenticate_async(self, request: Request) -> tuple[NostrUser, Nip98Auth]:
        django_request: Any = request._request
        record_nip98_check()
        try:
            auth = verify_nip98(
                # META, not `request.headers`: that builds the whole header map per request.
                django_request.META.get("HTTP_AUTHORIZATION"),
                url=absolute_url(django_request),
                method=request.method or "",
                body=request_body(request) or None,
                now=int(time.time()),
                window=WINDOW_SECONDS,
            )
        except Nip98Error as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from None
        if not await claim_auth_event(auth.event_id, expires_at=auth.created_at + WINDOW_SECONDS):
            raise exceptions.AuthenticationFailed(REPLAY_MESSAGE)
        return NostrUser(auth.pubkey), auth

    def authenticate_header(self, request: Request) -> str:
        return "Nostr"
