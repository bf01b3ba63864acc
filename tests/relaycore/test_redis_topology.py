"""Where each Redis client looks (relaycore.redis_topology): the URL, or the sentinels' master.

The clients following a real failover are tests/faults/test_redis_sentinel.py."""

from __future__ import annotations

from redis.asyncio.sentinel import SentinelConnectionPool

from relaycore.redis_topology import (
    REDIS_TIMEOUT_SECONDS,
    Sentinels,
    async_redis,
    channel_layer_host,
    sentinel_cache_options,
    sentinel_master,
)

ADDRESSES = (("127.0.0.1", 26379), ("127.0.0.2", 26380))
SENTINELS = Sentinels(ADDRESSES)


def test_without_sentinels_every_client_uses_the_url() -> None:
    url = "redis://cache:6379/2"
    assert sentinel_cache_options(Sentinels()) == {}
    assert channel_layer_host(url, Sentinels()) == url
    client = async_redis(url, Sentinels())
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
    assert host["sentinels"] == list(ADDRESSES)
    client = async_redis(url, SENTINELS)
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "mymaster" and pool.is_master
    assert pool.connection_kwargs["socket_timeout"] == REDIS_TIMEOUT_SECONDS


def test_the_sentinels_password_goes_to_the_sentinels_and_the_urls_to_the_master() -> None:
    url = "redis://:master-pw@mymaster/1"
    sentinels = Sentinels(ADDRESSES, username="watcher", password="sentinel-pw")
    options = sentinel_cache_options(sentinels)
    assert options["SENTINEL_KWARGS"]["password"] == "sentinel-pw"
    assert options["SENTINEL_KWARGS"]["username"] == "watcher"
    assert Sentinels.of_cache(options) == sentinels
    host = channel_layer_host(url, sentinels)
    assert isinstance(host, dict)
    assert host["sentinel_kwargs"]["password"] == "sentinel-pw"
    assert host["password"] == "master-pw"
    client = async_redis(url, sentinels)
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.connection_kwargs["password"] == "master-pw"
    for sentinel in pool.sentinel_manager.sentinels:
        kwargs = sentinel.connection_pool.connection_kwargs
        assert (kwargs["username"], kwargs["password"]) == ("watcher", "sentinel-pw")
    assert "sentinel-pw" not in repr(sentinels)
