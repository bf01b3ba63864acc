"""A lean, pipelined Redis connection per event loop, for the commands on a request's path.

Hand-written because a measurement justifies it: a NIP-98 replay claim (`SET key 1 NX EX ttl`)
through redis-py's asyncio client costs 92-118 us of CPU (its command stack: the pool checkout,
the retry wrapper, the timeout around the write and the read, the parser), the same command
written to an asyncio transport and its reply read in `data_received` 23-33 us (docs/
performance.md, "Quiet rounds by design"), and a round's claim was 12-14% of its relay CPU.

What it keeps of redis-py: where Redis is and how to reach it (the URL's host, port or socket
path, database, credentials and TLS options through redis-py's own `parse_url` and
`RedisSSLContext`; with sentinels, the master redis-py's `Sentinel` names, asked again on every
connect, so a failover is followed as the other clients follow it), and its exceptions (every
failure here raises a `redis.exceptions.RedisError` or an `OSError`, which the callers already
treat as "Redis is down").

How it works: one connection per event loop, opened on first use (and again after it failed).
Commands asked in one turn of the loop are written together on the next (one write for all,
the replies read in order: Redis answers a connection's commands in the order sent, so two
`SET NX` of one key still get one winner); nothing waits for an earlier command's reply. A reply
not read within REDIS_TIMEOUT_SECONDS (at most twice that, one timer for the connection rather
than one per command) fails the connection and every command still waiting on it; so does an
error reply (a failover's `READONLY`, an `OOM`): the next command connects afresh. RESP2 only:
simple strings, errors, integers and bulk strings, all the commands here answer.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio.connection import RedisSSLContext, parse_url
from redis.asyncio.sentinel import Sentinel
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from relaycore.redis_topology import REDIS_TIMEOUT_SECONDS, Sentinels, sentinel_master

__all__ = ["PipelinedRedis", "RedisEndpoint", "Reply", "pack_command"]

Reply = bytes | int | None

# The SSL options redis-py reads from a URL's query (`ssl_cert_reqs=none`, ...), by the name
# `RedisSSLContext` takes them.
_SSL_OPTIONS = {
    "ssl_keyfile": "keyfile", "ssl_certfile": "certfile", "ssl_cert_reqs": "cert_reqs",
    "ssl_ca_certs": "ca_certs", "ssl_ca_data": "ca_data", "ssl_ca_path": "ca_path",
    "ssl_check_hostname": "check_hostname", "ssl_min_version": "min_version",
    "ssl_ciphers": "ciphers", "ssl_password": "password",
}


def pack_command(*args: bytes | str | int) -> bytes:
    """One command in RESP (an array of bulk strings)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        raw = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(parts)


@dataclass(frozen=True)
class RedisEndpoint:
    """How to reach the relay's Redis: its URL's parts as redis-py reads them (with sentinels,
    REDIS_URL's host part names the master, `relaycore.redis_topology.sentinel_master`)."""

    host: str = "localhost"
    port: int = 6379
    path: str | None = None  # a Unix socket
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    # TLS (rediss://): `RedisSSLContext`'s arguments from the URL's query; None: no TLS.
    tls: dict[str, Any] | None = field(default=None, repr=False)
    sentinels: Sentinels = field(default_factory=Sentinels)
    master: str | None = None  # the name the sentinels know the master by

    @classmethod
    def of(cls, url: str, sentinels: Sentinels) -> RedisEndpoint:
        if sentinels:
            master = sentinel_master(url)
            return cls(db=master.db, username=master.username, password=master.password,
                       tls={} if master.ssl else None, sentinels=sentinels, master=master.name)
        options: dict[str, Any] = dict(parse_url(url))
        connection_class = options.get("connection_class")
        return cls(
            host=options.get("host", "localhost"),
            port=int(options.get("port", 6379)),
            path=options.get("path"),
            db=int(options.get("db") or 0),
            username=options.get("username"),
            password=options.get("password"),
            tls={ours: options[name] for name, ours in _SSL_OPTIONS.items() if name in options}
            if connection_class is not None and connection_class.__name__ == "SSLConnection"
            else None,
        )

    def setup_commands(self) -> list[bytes]:
        """What a new connection sends before its first command: AUTH, SELECT."""
        commands = []
        if self.password:
            credentials = (self.username, self.password) if self.username else (self.password,)
            commands.append(pack_command("AUTH", *credentials))
        if self.db:
            commands.append(pack_command("SELECT", self.db))
        return commands

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context redis-py builds for these options (None: no TLS)."""
        return None if self.tls is None else RedisSSLContext(**self.tls).get()


class _Protocol(asyncio.Protocol):
    """One connection's commands and replies, in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self._loop = loop
        self._timeout = timeout
        # uvloop's transports are not `asyncio.Transport` instances: typed as what is used.
        self._transport: asyncio.WriteTransport | None = None
        self._outgoing: list[bytes] = []
        self._waiting: collections.deque[asyncio.Future[Reply]] = collections.deque()
        self._buffer = bytearray()
        self._sent = 0  # commands written
        self._answered = 0  # replies read
        self._timer: asyncio.TimerHandle | None = None
        self.failed: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError(f"Redis closed the connection ({exc or 'EOF'})"))

    def command(self, packed: bytes) -> asyncio.Future[Reply]:
        """Send `packed` on the loop's next turn, with whatever else this turn asks."""
        if self.failed is not None:
            raise self.failed
        answer: asyncio.Future[Reply] = self._loop.create_future()
        self._waiting.append(answer)
        if not self._outgoing:
            self._loop.call_soon(self._flush)
        self._outgoing.append(packed)
        return answer

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _flush(self) -> None:
        if self.failed is not None or not self._outgoing:
            return
        outgoing, self._outgoing = self._outgoing, []
        assert self._transport is not None
        self._transport.write(outgoing[0] if len(outgoing) == 1 else b"".join(outgoing))
        self._sent += len(outgoing)
        if self._timer is None:
            self._timer = self._loop.call_later(self._timeout, self._check, self._sent)

    def _check(self, due: int) -> None:
        """The replies to the first `due` commands should have been read by now."""
        self._timer = None
        if self.failed is not None:
            return
        if self._answered < due:
            self._fail(RedisTimeoutError("Redis did not answer in time"))
        elif self._sent > self._answered:
            self._timer = self._loop.call_later(self._timeout, self._check, self._sent)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        while buffer:
            end = buffer.find(b"\r\n")
            if end < 0:
                return
            kind = buffer[0]
            error: ResponseError | None = None
            reply: Reply
            if kind == 0x2B:  # + simple string
                reply, used = bytes(buffer[1:end]), end + 2
            elif kind == 0x24:  # $ bulk string
                length = int(buffer[1:end])
                if length < 0:
                    reply, used = None, end + 2
                else:
                    used = end + 2 + length + 2
                    if len(buffer) < used:
                        return
                    reply = bytes(buffer[end + 2 : end + 2 + length])
            elif kind == 0x3A:  # : integer
                reply, used = int(buffer[1:end]), end + 2
            elif kind == 0x2D:  # - error
                reply, used = None, end + 2
                error = ResponseError(buffer[1:end].decode("utf-8", "replace"))
            else:  # nothing a command here answers: the stream cannot be followed
                self._fail(RedisConnectionError(f"unexpected Redis reply type {kind:#x}"))
                return
            del buffer[:used]
            self._answered += 1
            if not self._waiting:
                self._fail(RedisConnectionError("a Redis reply nothing asked for"))
                return
            answer = self._waiting.popleft()
            if error is not None:
                if not answer.done():
                    answer.set_exception(error)
                # A failover's READONLY, an OOM: the next command connects afresh.
                self._fail(RedisConnectionError(f"Redis refused a command: {error}"))
                return
            if not answer.done():  # its caller went away
                answer.set_result(reply)

    def _fail(self, exc: BaseException) -> None:
        if self.failed is None:
            self.failed = exc
        waiting, self._waiting = self._waiting, collections.deque()
        for answer in waiting:
            if not answer.done():
                answer.set_exception(exc)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.close()


class PipelinedRedis:
    """Commands to one Redis on one event loop, over one pipelined connection."""

    def __init__(self, endpoint: RedisEndpoint, *, timeout: float = REDIS_TIMEOUT_SECONDS) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None
        self._sentinel: Sentinel | None = None
        if endpoint.sentinels:
            self._sentinel = Sentinel(
                list(endpoint.sentinels.addresses),
                sentinel_kwargs=endpoint.sentinels.connection_kwargs(),
            )

    async def execute(self, packed: bytes) -> Reply:
        """One command (`pack_command`'s bytes) and its reply; raises RedisError or OSError."""
        protocol = self._protocol
        if protocol is None or protocol.failed is not None:
            protocol = await self._connect()
        return await protocol.command(packed)

    async def set_nx(self, key: str, value: bytes, *, ex: int) -> bool:
        """`SET key value NX EX ex`: True when the key was set (it did not exist)."""
        return await self.execute(pack_command(b"SET", key, value, b"NX", b"EX", ex)) is not None

    def close(self) -> None:
        if self._protocol is not None:
            self._protocol.close()
            self._protocol = None

    async def _connect(self) -> _Protocol:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            protocol = self._protocol
            if protocol is not None and protocol.failed is None:
                return protocol  # another caller connected meanwhile
            self.close()
            protocol = await asyncio.wait_for(self._open(), self.timeout * 2)
            self._protocol = protocol
            return protocol

    async def _open(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        endpoint = self.endpoint

        def make() -> _Protocol:
            return _Protocol(loop, self.timeout)

        host, port = endpoint.host, endpoint.port
        if self._sentinel is not None:
            assert endpoint.master is not None
            host, port = await self._sentinel.discover_master(endpoint.master)
        tls = endpoint.ssl_context()
        connect = (
            loop.create_unix_connection(make, endpoint.path) if endpoint.path
            else loop.create_connection(make, host, port, ssl=tls,
                                        server_hostname=host if tls is not None else None)
        )
        _, protocol = await asyncio.wait_for(connect, self.timeout)
        try:
            for packed in self.endpoint.setup_commands():
                await asyncio.wait_for(protocol.command(packed), self.timeout)
        except BaseException:
            protocol.close()
            raise
        return protocol
