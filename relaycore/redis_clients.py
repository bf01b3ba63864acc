"""The relay's own Redis clients (the default cache's Redis) and their circuit breaker.

Rate limits, NIP-98 replay claims and the live fan-out talk to the cache's Redis directly. A
Redis failure opens a short breaker (`mark_redis_down`): for REDIS_RETRY_SECONDS every caller
goes straight to its fallback (local buckets, claims in PostgreSQL, no fan-out) instead of each
waiting for a connect timeout while Redis is down. Where that Redis is (one server, or the master
the sentinels name) is `relaycore.redis_topology`'s.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any
from weakref import WeakKeyDictionary

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from relaycore.redis_pipe import PipelinedRedis, RedisEndpoint
from relaycore.redis_topology import Sentinels, async_redis

__all__ = [
    "RedisUnavailable",
    "async_redis_client",
    "mark_redis_down",
    "pipelined_redis",
    "redis_client",
]

# After a Redis failure, go straight to the fallbacks for this long before trying again.
REDIS_RETRY_SECONDS = 5.0

_state_lock = threading.Lock()
_redis_down_until = 0.0


# The raw client of each cache configuration (its BACKEND and LOCATION), kept for the process:
# Django keeps cache objects per thread and asyncio context, so `get_redis_connection` built a
# new cache, client and 169-entry callback table for every live publish (each publish is a
# task of its own): a tenth of a write's relay CPU in a profile. redis-py clients are
# thread-safe (each command takes a connection from the shared pool).
_sync_clients: dict[tuple[str, str], Any] = {}


def redis_client() -> Any | None:
    """The raw Redis client behind the default cache, or None (no Redis, or it just failed)."""
    if time.monotonic() < _redis_down_until:
        return None
    if not _cache_is_redis():
        return None
    default: dict[str, Any] = settings.CACHES["default"]
    key = (str(default["BACKEND"]), repr(default.get("LOCATION")))
    client = _sync_clients.get(key)
    if client is None:
        from django_redis import get_redis_connection

        client = _sync_clients.setdefault(key, get_redis_connection("default"))
    return client


class RedisUnavailable(Exception):
    """Redis is not configured, its breaker is open, or it just failed (the breaker is now open):
    the caller takes its fallback (local buckets, replay claims in PostgreSQL)."""


_async_clients: WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = WeakKeyDictionary()


def async_redis_client() -> Any:
    """This event loop's asyncio client of the cache's Redis; raises `RedisUnavailable`."""
    return _this_loops(_async_clients, async_redis)


_pipelined: WeakKeyDictionary[asyncio.AbstractEventLoop, PipelinedRedis] = WeakKeyDictionary()


def pipelined_redis() -> PipelinedRedis:
    """This event loop's lean, pipelined connection to the cache's Redis (the same Redis as
    `async_redis_client`'s), for the commands on a request's path (`relaycore.redis_pipe`);
    raises `RedisUnavailable`."""
    return _this_loops(_pipelined, lambda url, sentinels: PipelinedRedis(
        RedisEndpoint.of(url, sentinels)))


def _this_loops[C](clients: WeakKeyDictionary[asyncio.AbstractEventLoop, C],
                   make: Callable[[str, Sentinels], C]) -> C:
    """The running loop's client in `clients`, made on first use; raises `RedisUnavailable`
    while the breaker is open or when the cache is not Redis."""
    if time.monotonic() < _redis_down_until:
        raise RedisUnavailable
    loop = asyncio.get_running_loop()
    client = clients.get(loop)
    if client is None:
        if not _cache_is_redis():
            raise RedisUnavailable
        # The cache's own Redis (its LOCATION, or the master its sentinels name), so the
        # buckets and claims are where the cache is.
        cache: dict[str, Any] = settings.CACHES["default"]
        location: Any = cache["LOCATION"]
        client = clients[loop] = make(
            location if isinstance(location, str) else location[0],
            Sentinels.of_cache(cache.get("OPTIONS", {})),
        )
    return client


def _cache_is_redis() -> bool:
    # From the settings, not `caches["default"]`, which builds a cache object in every new
    # thread and asyncio context.
    return str(settings.CACHES["default"]["BACKEND"]).split(".")[0] == "django_redis"


def mark_redis_down() -> None:
    global _redis_down_until
    with _state_lock:
        _redis_down_until = time.monotonic() + REDIS_RETRY_SECONDS


@receiver(setting_changed)
def _caches_changed(*, setting: str, **kwargs: Any) -> None:
    # A new cache configuration is a new Redis: forget what the breaker knew about the old one.
    global _redis_down_until
    if setting == "CACHES":
        _redis_down_until = 0.0
        _async_clients.clear()
        _sync_clients.clear()
        for loop, client in list(_pipelined.items()):
            if not loop.is_closed():
                loop.call_soon_threadsafe(client.close)
        _pipelined.clear()
