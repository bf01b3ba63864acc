"""Token buckets in Redis, and in-process while Redis is down."""

from __future__ import annotations

import time
import uuid

import orjson
import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings
from rest_framework.exceptions import Throttled

from relaycore.config import ConfigError, read_config
from relaycore.edge.exceptions import relay_exception_handler
from relaycore.ratelimit import KEY_PREFIX, take_token
from relaycore.redis_clients import redis_client

UNREACHABLE_REDIS = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "redis://127.0.0.1:1/0",
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5},
    }
}


def check_rate(key: str, *, rate: float, burst: int) -> float | None:
    """`take_token` driven from sync code (each call its own event loop, as a test can)."""
    return async_to_sync(take_token)(key, rate=rate, burst=burst)  # type: ignore[no-any-return]


def _key() -> str:
    return f"test:{uuid.uuid4()}"


def _drain(key: str, *, rate: float, burst: int) -> list[float | None]:
    """`burst + 1` takes in a row, on one event loop (a loop per take would be slow enough for
    the bucket to refill in between)."""

    async def takes() -> list[float | None]:
        return [await take_token(key, rate=rate, burst=burst) for _ in range(burst + 1)]

    return async_to_sync(takes)()  # type: ignore[no-any-return]


def test_a_bucket_allows_its_burst_then_says_when_to_retry() -> None:
    key = _key()
    answers = _drain(key, rate=20.0, burst=3)
    assert answers[:3] == [None, None, None]
    wait = answers[3]
    assert wait is not None and 0 < wait <= 0.05 + 1e-6
    time.sleep(wait + 0.02)
    assert check_rate(key, rate=20.0, burst=3) is None


def test_buckets_live_in_redis_where_every_instance_sees_them() -> None:
    client = redis_client()
    assert client is not None
    key = _key()
    check_rate(key, rate=1.0, burst=5)
    check_rate(key, rate=1.0, burst=5)
    tokens = float(client.hget(KEY_PREFIX + key, "v"))
    assert 2.9 <= tokens <= 3.1
    assert 0 < client.pttl(KEY_PREFIX + key) <= 6000


def test_rate_zero_turns_the_limit_off() -> None:
    key = _key()
    assert all(check_rate(key, rate=0, burst=1) is None for _ in range(50))


def test_limits_hold_in_process_while_redis_is_down() -> None:
    key = _key()
    with override_settings(CACHES=UNREACHABLE_REDIS):
        started = time.monotonic()
        answers = _drain(key, rate=0.5, burst=4)
        assert time.monotonic() - started < 2  # one failed connect, then the breaker
        assert answers[:4] == [None] * 4
        assert answers[4] is not None and 1.5 < answers[4] <= 2.0


def test_rate_limited_response() -> None:
    response = relay_exception_handler(Throttled(0.2), {})
    assert response.status_code == 429
    assert response["Retry-After"] == "1"
    assert orjson.loads(response.content)["error"] == "rate_limited"
    assert relay_exception_handler(Throttled(7.01), {})["Retry-After"] == "8"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RELAY_RATE_LIMIT_ADDRESS_RATE", "fast"),
        ("RELAY_RATE_LIMIT_ADDRESS_RATE", "-1"),
        ("RELAY_RATE_LIMIT_PUBKEY_RATE", "nan"),
        ("RELAY_RATE_LIMIT_PUBKEY_RATE", "inf"),
        ("RELAY_RATE_LIMIT_PUBKEY_BURST", "0"),
        ("RELAY_RATE_LIMIT_ADDRESS_BURST", "1.5"),
    ],
)
def test_bad_limits_stop_start_up_with_one_line(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name):
        read_config()


def test_limits_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAY_RATE_LIMIT_PUBKEY_RATE", "0")
    monkeypatch.setenv("RELAY_RATE_LIMIT_ADDRESS_BURST", "5000")
    limits = read_config().rate_limits
    assert (limits.pubkey_rate, limits.address_burst) == (0.0, 5000)
    assert limits.address_rate > 0 and limits.pubkey_burst >= 1


def test_one_redis_client_serves_every_thread_and_task_of_the_process() -> None:
    """Django keeps a cache object per thread and asyncio context; the raw client must not be
    rebuilt with it (a client per live publish cost a tenth of a write)."""
    import asyncio
    import threading

    first = redis_client()
    assert first is not None
    seen: list[object] = []
    thread = threading.Thread(target=lambda: seen.append(redis_client()))
    thread.start()
    thread.join()

    async def in_tasks() -> list[object]:
        async def one() -> object:
            return redis_client()

        return list(await asyncio.gather(one(), one()))

    seen.extend(asyncio.run(in_tasks()))
    assert all(client is first for client in seen)
    with override_settings(CACHES=UNREACHABLE_REDIS):  # another configuration, another client
        other = redis_client()
        assert other is not None and other is not first
