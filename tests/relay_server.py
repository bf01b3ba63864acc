"""A real relay server process for tests: `buzz-admin serve` on a free loopback port.

The production command itself (buzzrelay/server.py: uvicorn, the ASGI lifespan that registers
the instance, the static files, `buzzrelay.asgi.build_application()`), so what the suite tests
is what operators run; the quickstart runs the same code.

It serves the pytest database (pytest-django's `test_<name>`), so tests that use it must run with
`@pytest.mark.django_db(transaction=True)`: the server sees only committed data. Redis and the
relay key are the suite's (REDIS_URL, RELAY_SIGNING_KEY), so writes made by the test process
itself (through the services) reach the server's live subscribers over the channel layer.

    relay = start_relay()                      # or start_relay({"RELAY_PUBLIC_URL": ...})
    relay.url, relay.ws_url, relay.port
    relay.stop()                               # SIGTERM, then SIGKILL after a timeout

`relay_server` is a pytest fixture (module scope) for the common case of one server.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from buzzrelay.embedded import free_port

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"

__all__ = ["RelayProcess", "relay_server", "server_env", "start_relay"]


@dataclass
class RelayProcess:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    env: dict[str, str] = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{HOST}:{self.port}/"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    def rss(self) -> int:
        """The server process's resident memory in bytes, from /proc (one worker: `serve`
        runs uvicorn in this very process)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS in /proc")

    def wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"relay exited {self.process.returncode}:\n{self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"relay did not answer /healthz:\n{self.log()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int | None:
        """Stop the server (SIGTERM by default); returns its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode


def server_env(overrides: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """The environment of a server on the pytest database (call after Django's test DB setup)."""
    from django.conf import settings

    # The suite's own DATABASE_URL (options and credentials kept), naming the test database.
    parts = urlsplit(os.environ["DATABASE_URL"])
    test_database = str(settings.DATABASES["default"]["NAME"])
    database_url: str = urlunsplit(parts._replace(path="/" + test_database))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DATABASE_", "REDIS_", "RELAY_", "DJANGO_", "PYTEST"))
    }
    env.update(
        DATABASE_URL=database_url,
        RELAY_SIGNING_KEY=os.environ["RELAY_SIGNING_KEY"],
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    if os.environ.get("REDIS_URL"):
        env["REDIS_URL"] = os.environ["REDIS_URL"]
    for key, value in (overrides or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def start_relay(
    env_overrides: Mapping[str, str | None] | None = None, *, workers: int = 1,
    port: int | None = None,
) -> RelayProcess:
    """Start a relay server (`buzz-admin serve`, `workers` processes) on `port` (a free one by
    default; a test restarting "the same relay" passes the old one) and wait until it answers
    /healthz."""
    port = port or free_port()
    env = server_env(env_overrides)
    log_path = Path(tempfile.mkstemp(prefix=f"relay-{port}-", suffix=".log")[1])
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "buzzrelay.cli", "serve", "--host", HOST, "--port", str(port),
             "--workers", str(workers)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    relay = RelayProcess(process, port, log_path, env)
    try:
        relay.wait_healthy()
    except BaseException:
        relay.stop(signal.SIGKILL)
        raise
    return relay


@pytest.fixture(scope="module")
def relay_server(django_db_setup: None, django_db_blocker: object) -> Iterator[RelayProcess]:
    """One relay server for a test module (on the pytest database)."""
    relay = start_relay()
    try:
        yield relay
    finally:
        relay.stop()
        with contextlib.suppress(OSError):
            relay.log_path.unlink()
