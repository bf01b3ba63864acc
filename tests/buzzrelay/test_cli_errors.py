"""Bad settings stop every entry point with one clear line and no traceback.

Runs the installed `buzz-admin` (and manage.py) as subprocesses, exactly as an operator would.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from buzzrelay.embedded import free_port
from tests.artifacts.migrations.scratch import ROOT, buzz_admin_path, subprocess_env

GOOD_KEY = "5f1b6c6e2d4a7b3c9e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5"


def run(args: list[str], **env: str | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=120, cwd=ROOT,
        env=subprocess_env(**{"RELAY_SIGNING_KEY": GOOD_KEY, **env}),
    )


def admin(*args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    return run([str(buzz_admin_path()), *args], **env)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    return lines[0]


@pytest.mark.parametrize("command", ["check", "migrate", "build-indexes", "serve"])
def test_a_bad_relay_key_is_one_line(command: str) -> None:
    result = admin(command, RELAY_SIGNING_KEY="not-a-key")
    assert result.returncode == 2
    assert one_line(result) == (
        "buzz-admin: configuration error: RELAY_SIGNING_KEY must be a 64-character hex "
        "secp256k1 secret key"
    )


@pytest.mark.parametrize("command", ["check", "migrate", "serve"])
def test_a_bad_database_url_is_one_line(command: str) -> None:
    result = admin(command, DATABASE_URL="mysql://relay@db.internal/buzz")
    assert result.returncode == 2
    assert one_line(result) == (
        "buzz-admin: configuration error: DATABASE_URL must look like "
        "postgres://user:password@host:5432/dbname (got scheme 'mysql')"
    )


def test_a_bad_database_url_option_is_one_line() -> None:
    result = admin("check", "--database-url", "postgres://relay@db.internal:port/buzz")
    assert result.returncode == 2
    assert one_line(result) == (
        "buzz-admin: configuration error: DATABASE_URL has a port that is not a number"
    )


def test_serve_refuses_to_start_without_a_database_url() -> None:
    result = admin("serve", DATABASE_URL=None)
    assert result.returncode == 2
    assert one_line(result) == (
        "buzz-admin: DATABASE_URL is not set: serve needs the deployment's PostgreSQL "
        "(the embedded database is for bin/quickstart only)"
    )


def test_serve_refuses_several_workers_without_redis() -> None:
    result = admin("serve", "--workers", "2", REDIS_URL=None)
    assert result.returncode == 2
    assert one_line(result) == (
        "buzz-admin: --workers above 1 needs REDIS_URL: without Redis each worker process has "
        "its own channel layer, and live events would not cross between workers"
    )


@pytest.mark.parametrize("command", ["check", "migrate", "build-indexes"])
def test_an_unreachable_database_is_one_line(command: str) -> None:
    nowhere = f"postgres://postgres@127.0.0.1:{free_port()}/buzz"
    result = admin(command, DATABASE_URL=nowhere)
    assert result.returncode == 1
    line = one_line(result)
    assert line.startswith(f"buzz-admin {command}: cannot connect to PostgreSQL (buzz on "
                           "127.0.0.1:"), line


def test_other_entry_points_stop_with_one_line_too() -> None:
    manage = run([sys.executable, "manage.py", "check"], RELAY_SIGNING_KEY="zz")
    assert manage.returncode == 2
    assert one_line(manage).startswith("configuration error: RELAY_SIGNING_KEY must be")
    asgi = run([sys.executable, "-c", "import buzzrelay.asgi"], DEBUG="sometimes")
    assert asgi.returncode == 2
    assert one_line(asgi) == "configuration error: DEBUG must be true or false (got 'sometimes')"
