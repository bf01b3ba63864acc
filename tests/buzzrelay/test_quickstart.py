"""The quickstart (README command 1) starts, answers HTTP, keeps its key, and stops cleanly.

It runs as a subprocess with DATABASE_URL unset, so it starts its own embedded PostgreSQL, with
its data directory (BUZZ_DATA_DIR) under the test's temporary folder.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from buzzrelay.embedded import free_port
from nostr.schnorr import generate_secret, pubkey_from_secret
from tests.artifacts.migrations.scratch import ROOT, subprocess_env

pytestmark = pytest.mark.slow


class Quickstart:
    def __init__(self, data_dir: Path, port: int) -> None:
        self.port = port
        self.lines: list[str] = []
        # No XDG_RUNTIME_DIR, as for root in a container or over ssh: a library that warns
        # about it must not reach the first user's screen.
        env = subprocess_env(DATABASE_URL=None, REDIS_URL=None, RELAY_SIGNING_KEY=None,
                             RELAY_SIGNING_KEY_FILE=None, BUZZ_DATA_DIR=str(data_dir),
                             XDG_RUNTIME_DIR=None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "buzzrelay.quickstart", "--port", str(port)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_until_serving(self, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"quickstart exited {self.process.returncode}:\n{self.output}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"quickstart did not answer within {timeout} s:\n{self.output}")

    def printed_pubkey(self) -> str:
        match = re.search(r"relay pubkey: ([0-9a-f]{64})", self.output)
        assert match, self.output
        return match.group(1)

    def stop(self, how: signal.Signals = signal.SIGTERM) -> int:
        self.process.send_signal(how)
        code = self.process.wait(timeout=60)
        self._reader.join(5)
        return code


def test_quickstart_serves_keeps_its_key_and_stops_cleanly(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    first = Quickstart(data_dir, port)
    try:
        first.wait_until_serving()
        # A fresh start says what it does and nothing alarming before the relay starts: no
        # "no table ... does not exist" from the index prebuild, no library warning.
        before_start = first.output.split("Buzz relay is starting.")[0]
        assert "does not exist" not in before_start, before_start
        assert "Warning" not in before_start and "warn" not in before_start.lower(), before_start
        for host in ("127.0.0.1", "localhost"):
            response = httpx.get(f"http://127.0.0.1:{port}/info", headers={"Host": host})
            assert response.status_code == 200, (host, response.text)
        unknown = httpx.get(f"http://127.0.0.1:{port}/info", headers={"Host": "elsewhere.test"})
        assert unknown.status_code == 404
        assert unknown.json()["error"] == "unknown_community"
        admin = httpx.get(f"http://127.0.0.1:{port}/admin/login/")
        assert admin.status_code == 200 and "csrfmiddlewaretoken" in admin.text
        css = httpx.get(f"http://127.0.0.1:{port}/static/admin/css/base.css")
        assert css.status_code == 200
        # The production stack: the instance registered itself (lifespan), so the operator's
        # readiness command on the same database agrees with the relay.
        pid_lines = (data_dir / "postgres" / "postmaster.pid").read_text().splitlines()
        database_url = f"postgres://postgres@127.0.0.1:{int(pid_lines[3])}/buzz"
        readiness = subprocess.run(
            [sys.executable, "-m", "buzzrelay.cli", "readiness", "--database-url", database_url],
            capture_output=True, text=True, timeout=60, cwd=ROOT, env=subprocess_env(),
        )
        assert readiness.returncode == 0, readiness.stdout + readiness.stderr
        assert "Every deployment is ready" in readiness.stdout
        # What a first user is told: the database URL, and the admin line, which adds.
        printed = re.search(
            r"^  DATABASE_URL=(\S+) (\S+) community --host 127\.0\.0\.1 --add-admin "
            r"<your hex pubkey>$", first.output, re.M,
        )
        assert printed and printed.group(1) == database_url, first.output
        assert printed.group(2) == str(ROOT / ".venv" / "bin" / "buzz-admin")
        assert f"export BUZZ_RELAY=ws://127.0.0.1:{port} " in first.output
        admins = [pubkey_from_secret(generate_secret()) for _ in range(2)]
        for new_admin in admins:
            added = subprocess.run(
                [sys.executable, "-m", "buzzrelay.cli", "community", "--host", "127.0.0.1",
                 "--add-admin", new_admin],
                capture_output=True, text=True, timeout=60, cwd=ROOT,
                env={**subprocess_env(), "DATABASE_URL": printed.group(1)},
            )
            assert added.returncode == 0, added.stdout + added.stderr
        assert all(key in added.stdout for key in admins), added.stdout
    finally:
        code = first.stop()
    assert code == 0, first.output
    assert "Stopped." in first.output
    assert not (data_dir / "postgres" / "postmaster.pid").exists()  # PostgreSQL shut down

    key_file = data_dir / "relay.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    secret = key_file.read_text().strip()
    pubkey = first.printed_pubkey()
    assert pubkey == pubkey_from_secret(secret)
    password = (data_dir / "admin-password").read_text().strip()
    assert f"password {password!r}" in first.output

    second = Quickstart(data_dir, port)
    try:
        second.wait_until_serving()
        assert second.printed_pubkey() == pubkey
        login = httpx.Client(base_url=f"http://127.0.0.1:{port}")
        page = login.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token, page.text
        answer = login.post(
            "/admin/login/?next=/admin/",
            data={"username": "admin", "password": password,
                  "csrfmiddlewaretoken": token.group(1), "next": "/admin/"},
            headers={"Referer": f"http://127.0.0.1:{port}/admin/login/"},
        )
        assert answer.status_code == 302 and answer.headers["location"] == "/admin/", answer.text
        readiness_page = login.get("/admin/relayinfo/readiness/").text
        assert "Ready." in readiness_page and "1 live instances" in readiness_page
    finally:
        assert second.stop(signal.SIGINT) == 0, second.output  # Ctrl-C
    assert key_file.read_text().strip() == secret
    assert "Stopped." in second.output
    assert not (data_dir / "postgres" / "postmaster.pid").exists()
