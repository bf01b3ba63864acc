"""Where the relay's Redis is: one server (REDIS_URL), or the master Redis Sentinels name.

With REDIS_SENTINELS set, REDIS_URL's host part is the name of the master the sentinels monitor
(`redis://mymaster/0`, django-redis' convention), and every client of Redis asks the sentinels
for that master's address whenever it (re)connects: django-redis' cache through its
SentinelConnectionFactory, channels_redis' layer through its `master_name` host, and the rate
limiter's and replay claims' asyncio client through redis-py's Sentinel. After a failover each
reconnects to the promoted replica; meanwhile the callers take the fallbacks they take while
Redis is down (relaycore.redis_clients). Only the master is used, never a replica: replicas lag,
and a replay claim or a rate bucket read from one could be stale.

Sentinels may ask for a password of their own (a sentinel's `requirepass`, which is not the
master's): REDIS_SENTINEL_PASSWORD, or `user:password@` before the sentinels' addresses. Every
client gives it to the sentinels only (their `sentinel_kwargs`), and REDIS_URL's to the master.

Settings-level code: imports no Django.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import redis.asyncio
from redis.asyncio.sentinel import Sentinel

__all__ = [
    "REDIS_TIMEOUT_SECONDS",
    "SentinelMaster",
    "Sentinels",
    "async_redis",
    "channel_layer_host",
    "sentinel_cache_options",
    "sentinel_master",
]

# Connect and command timeouts of every Redis client (the sentinels' too): fail fast, so a
# request falls back instead of waiting on a Redis that is gone.
REDIS_TIMEOUT_SECONDS = 0.5



@dataclass(frozen=True)
class Sentinels:
    """The Redis Sentinels (REDIS_SENTINELS) and the credentials they ask for: one set for all
    of them, because each client library takes one (`sentinel_kwargs`) for every sentinel.
    False when there are none: the clients then use REDIS_URL as it is."""

    addresses: tuple[tuple[str, int], ...] = ()
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    def __bool__(self) -> bool:
        return bool(self.addresses)

    def connection_kwargs(self) -> dict[str, Any]:
        """redis-py's keyword arguments for a connection to a sentinel."""
        kwargs: dict[str, Any] = {"socket_connect_timeout": REDIS_TIMEOUT_SECONDS,
                                  "socket_timeout": REDIS_TIMEOUT_SECONDS}
        if self.username:
            kwargs["username"] = self.username
        if self.password:
            kwargs["password"] = self.password
        return kwargs

    @classmethod
    def of_cache(cls, options: dict[str, Any]) -> Sentinels:
        """The sentinels a django-redis cache's OPTIONS (sentinel_cache_options) name."""
        kwargs = options.get("SENTINEL_KWARGS") or {}
        return cls(
            addresses=tuple((str(host), int(port)) for host, port in options.get("SENTINELS", ())),
            username=kwargs.get("username"),
            password=kwargs.get("password"),
        )


@dataclass(frozen=True)
class SentinelMaster:
    """The master REDIS_URL names when sentinels find it: its name, database and credentials."""

    name: str
    db: int
    username: str | None
    password: str | None
    ssl: bool

    def connection_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "db": self.db,
            "socket_connect_timeout": REDIS_TIMEOUT_SECONDS,
            "socket_timeout": REDIS_TIMEOUT_SECONDS,
        }
        if self.username:
            kwargs["username"] = self.username
        if self.password:
            kwargs["password"] = self.password
        if self.ssl:
            kwargs["ssl"] = True
        return kwargs


def sentinel_master(url: str) -> SentinelMaster:
    """`redis://[user:password@]<master name>[/<db>]` as the master to ask the sentinels for."""
    parts = urlsplit(url)
    path = parts.path.strip("/")
    return SentinelMaster(
        name=unquote(parts.hostname or ""),
        db=int(path) if path.isdigit() else 0,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        ssl=parts.scheme == "rediss",
    )


def sentinel_cache_options(sentinels: Sentinels) -> dict[str, Any]:
    """django-redis OPTIONS that find the cache's master through `sentinels` (none: {}).

    The DefaultClient with the SentinelConnectionFactory: reads and writes on the master only
    (django-redis' SentinelClient would read from replicas)."""
    if not sentinels:
        return {}
    return {
        "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
        "SENTINELS": [list(address) for address in sentinels.addresses],
        "SENTINEL_KWARGS": sentinels.connection_kwargs(),
    }


def channel_layer_host(url: str, sentinels: Sentinels) -> str | dict[str, Any]:
    """channels_redis' `hosts` entry: the URL, or the master through `sentinels`."""
    if not sentinels:
        return url
    master = sentinel_master(url)
    return {
        "master_name": master.name,
        "sentinels": list(sentinels.addresses),
        "sentinel_kwargs": sentinels.connection_kwargs(),
        **master.connection_kwargs(),
    }


def async_redis(url: str, sentinels: Sentinels) -> redis.asyncio.Redis:
    """An asyncio client of the relay's Redis: of `url`, or of its master through `sentinels`."""
    if not sentinels:
        return redis.asyncio.Redis.from_url(
            url, socket_connect_timeout=REDIS_TIMEOUT_SECONDS, socket_timeout=REDIS_TIMEOUT_SECONDS
        )
    master = sentinel_master(url)
    manager = Sentinel(list(sentinels.addresses), sentinel_kwargs=sentinels.connection_kwargs())
    return manager.master_for(master.name, **master.connection_kwargs())
