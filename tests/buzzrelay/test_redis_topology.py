"""Where each Redis client looks (buzzrelay.redis_topology): the URL, or the sentinels' master.

The clients following a real failover are tests/faults/test_redis_sentinel.py."""

from __future__ import annotations

from redis.asyncio.sentinel import SentinelConnectionPool

from buzzrelay.redis_topology import (
    REDIS_TIMEOUT_SECONDS,
    async_redis,
    channel_layer_host,
    sentinel_cache_options,
    sentinel_master,
)

SENTINELS = (("127.0.0.1", 26379), ("127.0.0.2", 26380))


def test_without_sentinels_every_client_uses_the_url() -> None:
    url = "redis://cache:6379/2"
    assert sentinel_cache_options(()) == {}
    assert channel_layer_host(url, ()) == url
    client = async_redis(url, ())
    assert client.connection_pool.connection_kwargs["host"] == "cache"
    assert client.connection_pool.connection_kwargs["db"] == 2


def test_the_url_names_the_master_its_database_and_credentials() -> None:
    master = sentinel_master("rediss://relay:s%40cret@mymaster/4")
    assert (master.name, master.db, master.username, master.password, master.ssl) == (
        "mymaster", 4, "relay", "s@cret", True)
    assert sentinel_master("redis://mymaster").db == 0


def test_with_sentinels_every_client_asks_them_for_the_master_only() -> None:
    url = "redis://:pw@mymaster/1"
    options = sentinel_cache_options(SENTINELS)
    # The DefaultClient (no CLIENT_CLASS): django-redis' SentinelClient would read replicas.
    assert "CLIENT_CLASS" not in options
    assert options["CONNECTION_FACTORY"] == "django_redis.pool.SentinelConnectionFactory"
    assert options["SENTINELS"] == [["127.0.0.1", 26379], ["127.0.0.2", 26380]]
    host = channel_layer_host(url, SENTINELS)
    assert isinstance(host, dict)
    assert (host["master_name"], host["db"], host["password"]) == ("mymaster", 1, "pw")
    assert host["sentinels"] == list(SENTINELS)
    client = async_redis(url, SENTINELS)
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "mymaster" and pool.is_master
    assert pool.connection_kwargs["socket_timeout"] == REDIS_TIMEOUT_SECONDS
