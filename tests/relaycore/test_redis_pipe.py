"""The lean, pipelined Redis connection (relaycore.redis_pipe): against the test Redis, and
against small fake servers for what a real one rarely does (stall, refuse, split a reply)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from relaycore.redis_pipe import PipelinedRedis, RedisEndpoint, _Protocol, pack_command
from relaycore.redis_topology import Sentinels

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/5")


def test_commands_are_packed_as_resp_arrays_of_bulk_strings() -> None:
    assert pack_command(b"SET", "k", b"1", b"NX", b"EX", 90) == (
        b"*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n1\r\n$2\r\nNX\r\n$2\r\nEX\r\n$2\r\n90\r\n"
    )


def test_the_endpoint_is_read_from_the_url_as_redis_py_reads_it() -> None:
    endpoint = RedisEndpoint.of("redis://user:p%40ss@cache.example:6390/3", Sentinels())
    assert (endpoint.host, endpoint.port, endpoint.db, endpoint.tls) == (
        "cache.example", 6390, 3, None)
    assert endpoint.setup_commands() == [
        pack_command("AUTH", "user", "p@ss"), pack_command("SELECT", 3)]
    assert RedisEndpoint.of("redis://127.0.0.1:6379", Sentinels()).setup_commands() == []
    assert RedisEndpoint.of("redis://:pw@h/0", Sentinels()).setup_commands() == [
        pack_command("AUTH", "pw")]
    assert RedisEndpoint.of("unix:///run/redis.sock?db=2", Sentinels()).path == "/run/redis.sock"
    tls = RedisEndpoint.of("rediss://h:6380/0?ssl_cert_reqs=none", Sentinels())
    assert tls.tls == {"cert_reqs": "none"}
    assert tls.ssl_context() is not None


def test_with_sentinels_the_url_names_the_master() -> None:
    sentinels = Sentinels(addresses=(("10.0.0.1", 26379),), password="s")
    endpoint = RedisEndpoint.of("redis://:masterpw@mymaster/4", sentinels)
    assert (endpoint.master, endpoint.db, endpoint.password) == ("mymaster", 4, "masterpw")
    assert endpoint.setup_commands() == [pack_command("AUTH", "masterpw"),
                                         pack_command("SELECT", 4)]


def test_set_nx_against_redis_selects_the_database_and_keeps_one_winner_per_key() -> None:
    key = f"test:pipe:{uuid.uuid4().hex}"
    admin = redis.Redis.from_url(REDIS_URL)

    async def run() -> list[bool]:
        client = PipelinedRedis(RedisEndpoint.of(REDIS_URL, Sentinels()))
        try:
            # Asked in one turn: written together, answered in order.
            return list(await asyncio.gather(
                client.set_nx(key, b"1", ex=30), client.set_nx(key, b"1", ex=30),
                client.set_nx(key + ":other", b"1", ex=30)))
        finally:
            client.close()

    try:
        assert asyncio.run(run()) == [True, False, True]
        assert admin.get(key) == b"1"  # in REDIS_URL's database (SELECT was sent)
        assert 0 < admin.ttl(key) <= 30
    finally:
        admin.delete(key, key + ":other")
        admin.close()


async def _serve(
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> tuple[asyncio.Server, RedisEndpoint]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, RedisEndpoint.of(f"redis://127.0.0.1:{port}/0", Sentinels())


def test_one_write_carries_a_turns_commands() -> None:
    received: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read(65536)
        received.append(data)
        writer.write(b"+OK\r\n$-1\r\n:7\r\n")
        await writer.drain()
        await reader.read()  # until the client goes

    async def run() -> list[object]:
        server, endpoint = await _serve(handler)
        client = PipelinedRedis(endpoint)
        try:
            await client._connect()  # so the three below are asked in one turn
            return list(await asyncio.gather(
                client.execute(pack_command("SET", "a", "1")),
                client.execute(pack_command("GET", "b")),
                client.execute(pack_command("INCR", "c"))))
        finally:
            client.close()
            server.close()

    assert asyncio.run(run()) == [b"OK", None, 7]
    assert received == [pack_command("SET", "a", "1") + pack_command("GET", "b")
                        + pack_command("INCR", "c")]


def test_a_stalled_redis_fails_the_waiting_commands_and_the_next_connects_afresh() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        first = connections == 1
        await reader.read(65536)
        if not first:  # the first connection never answers
            writer.write(b"+OK\r\n")
            await writer.drain()
        await reader.read()

    async def run() -> bool:
        server, endpoint = await _serve(handler)
        client = PipelinedRedis(endpoint, timeout=0.2)
        try:
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(RedisTimeoutError):
                await client.set_nx("k", b"1", ex=5)
            assert loop.time() - started < 1.0  # within twice the timeout, and some slack
            return await client.set_nx("k", b"1", ex=5)
        finally:
            client.close()
            server.close()

    assert asyncio.run(run()) is True
    assert connections == 2


def test_an_error_reply_fails_its_command_and_drops_the_connection() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        reply = b"-READONLY You can't write against a read only replica.\r\n" if (
            connections == 1) else b"$-1\r\n"
        await reader.read(65536)
        writer.write(reply)
        await writer.drain()
        await reader.read()

    async def run() -> bool:
        server, endpoint = await _serve(handler)
        client = PipelinedRedis(endpoint)
        try:
            with pytest.raises(ResponseError, match="READONLY"):
                await client.set_nx("k", b"1", ex=5)
            return await client.set_nx("k", b"1", ex=5)  # a new connection: the key exists
        finally:
            client.close()
            server.close()

    assert asyncio.run(run()) is False
    assert connections == 2


def test_a_closed_connection_fails_what_waits_on_it() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.close()

    async def run() -> None:
        server, endpoint = await _serve(handler)
        client = PipelinedRedis(endpoint)
        try:
            with pytest.raises(RedisConnectionError):
                await client.set_nx("k", b"1", ex=5)
        finally:
            client.close()
            server.close()

    asyncio.run(run())


def test_nothing_listening_is_an_os_error() -> None:
    async def run() -> None:
        client = PipelinedRedis(RedisEndpoint.of("redis://127.0.0.1:1/0", Sentinels()))
        with pytest.raises(OSError):
            await client.set_nx("k", b"1", ex=5)

    asyncio.run(run())


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True


def test_replies_split_across_reads_are_put_together() -> None:
    async def run() -> list[object]:
        protocol = _Protocol(asyncio.get_running_loop(), timeout=5)
        protocol.connection_made(_Transport())
        answers = [protocol.command(pack_command("GET", "a")) for _ in range(3)]
        await asyncio.sleep(0)  # the write
        for chunk in (b"$5\r\nhe", b"llo\r", b"\n+O", b"K\r\n:-", b"3\r\n"):
            protocol.data_received(chunk)
        return [await answer for answer in answers]

    assert asyncio.run(run()) == [b"hello", b"OK", -3]


def test_set_nx_on_uvloop_as_the_served_relay_runs() -> None:
    """uvicorn runs the relay on uvloop, whose transports are not asyncio's classes."""
    uvloop = pytest.importorskip("uvloop")
    key = f"test:pipe:{uuid.uuid4().hex}"
    admin = redis.Redis.from_url(REDIS_URL)

    async def run() -> list[bool]:
        client = PipelinedRedis(RedisEndpoint.of(REDIS_URL, Sentinels()))
        try:
            first = await client.set_nx(key, b"1", ex=30)
            return [first, *await asyncio.gather(client.set_nx(key, b"1", ex=30),
                                                 client.set_nx(key + ":b", b"1", ex=30))]
        finally:
            client.close()

    try:
        assert uvloop.run(run()) == [True, False, True]
    finally:
        admin.delete(key, key + ":b")
        admin.close()
