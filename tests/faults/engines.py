"""Debian's PgBouncer and Redis Sentinel as foreground children of a test, on loopback.

Each engine runs from the machine's packages (`bin/bootstrap test` installs `pgbouncer` and
`redis-sentinel`), on free ports, with its configuration and logs in a folder of the test's
own, and is stopped by the test (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import redis

from buzzrelay.embedded import POSTGRES_SYSTEM_USER, free_port, redis_server_binary
from tests.faults.deployment import HOST
from tests.faults.waits import wait_until

__all__ = ["PgBouncer", "RedisNode", "SentinelSet", "start_pgbouncer", "start_sentinel_set"]


def _binary(name: str, package: str) -> str:
    found = shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.exists()), None
    )
    if found is None:
        raise RuntimeError(f"{name} not found: `bin/bootstrap test` installs Debian's {package}")
    return found


def _stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _port_open(port: int) -> bool:
    import socket

    with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.2):
        return True
    return False


@dataclass
class PgBouncer:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    def url(self, database: str) -> str:
        return f"postgres://postgres@{HOST}:{self.port}/{database}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        _stop(self.process)


def start_pgbouncer(root: Path, *, postgres_port: int, pool_mode: str, pool_size: int = 4
                    ) -> PgBouncer:
    """PgBouncer in `pool_mode` in front of the PostgreSQL on `postgres_port` (trust auth, as
    the embedded server has it), at most `pool_size` server connections per database."""
    folder = root / f"pgbouncer-{pool_mode}"
    folder.mkdir()
    port = free_port()
    (folder / "users.txt").write_text('"postgres" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={HOST} port={postgres_port}\n"
        "[pgbouncer]\n"
        f"listen_addr = {HOST}\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {folder / 'users.txt'}\n"
        f"pool_mode = {pool_mode}\n"
        f"default_pool_size = {pool_size}\n"
        "max_client_conn = 200\n"
        # The relay's pools, Django's and the async reads', open many client connections: far
        # more than `pool_size`, so server connections are really shared between them.
        "server_lifetime = 3600\n"
        "ignore_startup_parameters = extra_float_digits\n"
    )
    folder.chmod(0o755)
    for path in folder.iterdir():
        path.chmod(0o644)
    log_path = folder / "pgbouncer.log"
    command = [_binary("pgbouncer", "pgbouncer")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        command += ["-u", POSTGRES_SYSTEM_USER]
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [*command, str(folder / "pgbouncer.ini")], stdout=log, stderr=subprocess.STDOUT
        )
    bouncer = PgBouncer(process, port, log_path)
    try:
        wait_until(lambda: process.poll() is not None or _port_open(port), timeout=15)
        if process.poll() is not None:
            raise RuntimeError(f"PgBouncer exited {process.returncode}:\n{bouncer.log()}")
    except BaseException:
        bouncer.stop()
        raise
    return bouncer


@dataclass
class RedisNode:
    process: subprocess.Popen[bytes]
    port: int
    password: str | None = None  # its `requirepass`

    def client(self) -> redis.Redis:
        return redis.Redis(host=HOST, port=self.port, password=self.password, socket_timeout=2,
                           decode_responses=True)

    def kill(self) -> None:
        _stop(self.process, signal.SIGKILL)

    def stop(self) -> None:
        _stop(self.process)


@dataclass
class SentinelSet:
    """A Redis master, its replica and sentinels watching them as `master_name`."""

    master: RedisNode
    replica: RedisNode
    sentinels: list[RedisNode]
    master_name: str = "buzzmaster"
    folder: Path = field(default=Path())

    @property
    def addresses(self) -> str:
        """REDIS_SENTINELS."""
        return ",".join(f"{HOST}:{node.port}" for node in self.sentinels)

    def url(self, db: int = 0) -> str:
        """REDIS_URL: the master by name."""
        return f"redis://{self.master_name}/{db}"

    def master_port(self) -> int:
        """The master's port as the first sentinel reports it now."""
        address = self.sentinels[0].client().execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name
        )
        return int(address[1])

    def stop(self) -> None:
        for node in [*self.sentinels, self.replica, self.master]:
            node.stop()


def _redis_node(folder: Path, name: str, *extra: str) -> RedisNode:
    port = free_port()
    node_dir = folder / name
    node_dir.mkdir()
    process = subprocess.Popen(
        [redis_server_binary(), "--port", str(port), "--bind", HOST, "--save", "",
         "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
         "--dir", str(node_dir), *extra],
        stdout=(node_dir / "redis.log").open("ab"), stderr=subprocess.STDOUT,
    )
    wait_until(lambda: _port_open(port), timeout=15)
    return RedisNode(process, port)


def start_sentinel_set(root: Path, *, sentinels: int = 3, password: str | None = None
                       ) -> SentinelSet:
    """A master, a replica of it, and `sentinels` sentinels (quorum: a majority) that declare
    the master down after one second without an answer; with `password`, the sentinels ask for
    it (their `requirepass`, and what they give each other), the Redis servers for none."""
    folder = root / "sentinel-set"
    folder.mkdir()
    master = _redis_node(folder, "master")
    replica = _redis_node(folder, "replica", "--replicaof", HOST, str(master.port))
    wait_until(
        lambda: replica.client().info("replication").get("master_link_status") == "up",
        timeout=15,
    )
    binary = _binary("redis-sentinel", "redis-sentinel")
    nodes = []
    name = "buzzmaster"
    for index in range(sentinels):
        port = free_port()
        conf = folder / f"sentinel-{index}.conf"  # sentinels rewrite their file: one each
        conf.write_text(
            f"port {port}\nbind {HOST}\ndaemonize no\ndir {folder}\n"
            f"sentinel monitor {name} {HOST} {master.port} {sentinels // 2 + 1}\n"
            f"sentinel down-after-milliseconds {name} 1000\n"
            f"sentinel failover-timeout {name} 10000\n"
            f"sentinel parallel-syncs {name} 1\n"
            + (f"requirepass {password}\nsentinel sentinel-pass {password}\n" if password else "")
        )
        process = subprocess.Popen(
            [binary, str(conf)], stdout=(folder / f"sentinel-{index}.log").open("ab"),
            stderr=subprocess.STDOUT,
        )
        wait_until(partial(_port_open, port), timeout=15)
        nodes.append(RedisNode(process, port, password))
    topology = SentinelSet(master, replica, nodes, name, folder)

    def all_see_the_replica() -> bool:
        for node in nodes:
            try:
                replicas = node.client().execute_command("SENTINEL", "REPLICAS", name)
            except redis.RedisError:
                return False
            if not replicas:
                return False
        return True

    try:
        wait_until(all_see_the_replica, timeout=20)
    except BaseException:
        topology.stop()
        raise
    return topology


def wait_for_failover(topology: SentinelSet, old_port: int, timeout: float = 30) -> float:
    """Seconds until the sentinels name a master other than `old_port`."""
    started = time.monotonic()

    def moved() -> bool:
        try:
            return topology.master_port() != old_port
        except redis.RedisError:
            return False

    wait_until(moved, timeout=timeout)
    return time.monotonic() - started
