"""Rate limits: token buckets per client address and per pubkey (PROTOCOL.md section 3).

Buckets live in Redis, shared by every instance: one Lua script refills and takes a token
atomically on Redis's own clock. While Redis is unavailable each process keeps its own buckets,
so limits loosen (per instance) but serving continues. The client and its breaker (a Redis
failure opens it for a few seconds) are `relaycore.redis_clients`'s.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from redis.exceptions import NoScriptError, RedisError

from relaycore.redis_clients import RedisUnavailable, async_redis_client, mark_redis_down

__all__ = ["address_wait", "pubkey_wait", "take_token"]

KEY_PREFIX = "buzz:rl:"
LOCAL_MAX_BUCKETS = 100_000

# KEYS[1] bucket; ARGV rate (tokens/s), burst. Returns the wait in seconds as a string ("0" =
# allowed; a Lua number would be truncated to an integer reply). A refused request leaves the
# bucket as it was, so it keeps refilling from its last take.
_TAKE = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 't', 'v')
local tokens = burst
if state[1] then
  tokens = math.min(burst, tonumber(state[2]) + math.max(0, now - tonumber(state[1])) * rate)
end
if tokens < 1 then
  return tostring((1 - tokens) / rate)
end
redis.call('HSET', KEYS[1], 't', string.format('%.6f', now), 'v', tostring(tokens - 1))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return '0'
"""

_script_sha: str | None = None


@receiver(setting_changed)
def _caches_changed(*, setting: str, **kwargs: Any) -> None:
    # A new cache configuration is a new Redis, which has not loaded the script.
    global _script_sha
    if setting == "CACHES":
        _script_sha = None


class _LocalBuckets:
    """In-process buckets for while Redis is unavailable."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, key: str, rate: float, burst: int) -> float | None:
        now = time.monotonic()
        with self._lock:
            last, tokens = self._buckets.get(key, (now, float(burst)))
            tokens = min(float(burst), tokens + (now - last) * rate)
            if tokens < 1:
                return (1 - tokens) / rate
            if len(self._buckets) >= LOCAL_MAX_BUCKETS and key not in self._buckets:
                self._forget_full(now, rate, burst)
            self._buckets[key] = (now, tokens - 1)
            return None

    def _forget_full(self, now: float, rate: float, burst: int) -> None:
        # A bucket that has refilled completely is the same as no bucket.
        full = [k for k, (t, v) in self._buckets.items() if v + (now - t) * rate >= burst]
        for key in full:
            del self._buckets[key]
        if len(self._buckets) >= LOCAL_MAX_BUCKETS:
            self._buckets.clear()

    def clear(self) -> None:
        with self._lock:
            self._buckets.clear()


local_buckets = _LocalBuckets()


async def take_token(key: str, *, rate: float, burst: int) -> float | None:
    """Take one token from bucket `key`: None when allowed, else seconds until a token is due.

    `rate` tokens per second refill a bucket holding at most `burst`; `rate <= 0` is no limit.
    In Redis (every instance shares the bucket) through this event loop's asyncio client; while
    Redis is unavailable, from this process's local bucket.
    """
    global _script_sha
    if rate <= 0:
        return None
    try:
        client = async_redis_client()
        if _script_sha is None:
            _script_sha = await client.script_load(_TAKE)
        try:
            result = await client.evalsha(_script_sha, 1, KEY_PREFIX + key, repr(rate), burst)
        except NoScriptError:  # Redis restarted and lost its script cache
            _script_sha = await client.script_load(_TAKE)
            result = await client.evalsha(_script_sha, 1, KEY_PREFIX + key, repr(rate), burst)
    except RedisUnavailable:
        return local_buckets.take(key, rate, burst)
    except (RedisError, OSError):
        mark_redis_down()
        return local_buckets.take(key, rate, burst)
    wait = float(result)
    return wait if wait > 0 else None


async def address_wait(address: str) -> float | None:
    """The per-client-address limit (PROTOCOL.md section 3): taken before any signature is
    verified, on HTTP and on the WebSocket alike."""
    return await take_token(
        f"addr:{address}",
        rate=settings.RELAY_RATE_LIMIT_ADDRESS_RATE,
        burst=settings.RELAY_RATE_LIMIT_ADDRESS_BURST,
    )


async def pubkey_wait(pubkey: str) -> float | None:
    """The per-pubkey limit, for an authenticated pubkey."""
    return await take_token(
        f"pk:{pubkey}",
        rate=settings.RELAY_RATE_LIMIT_PUBKEY_RATE,
        burst=settings.RELAY_RATE_LIMIT_PUBKEY_BURST,
    )
