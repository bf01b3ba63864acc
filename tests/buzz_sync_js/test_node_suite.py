"""The TypeScript client (buzz-sync-js/) against real relays: Node's test runner runs the
package's own tests (buzz-sync-js/test/*.test.mjs) with the relay's URL and a community admin's
key in the environment, and this file serves them what only an operator can do.

The control endpoint (a small HTTP server in this process, on the pytest database): bump the
sync epoch, rotate the relay key (the relay restarted on the same port with the old key
retired), start a rate-limited relay, and run buzz-sync (the Python client) for the parity
test. Node's whole output is shown when it fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from django.conf import settings
from django.db import connections

from artifacts.services.sync_epoch import bump_epoch
from buzzclient import Syncer
from buzzrelay.admin_commands._pg import close_with_pool
from nostr.schnorr import pubkey_from_secret
from tests.factories import make_community, make_key
from tests.relay_server import RelayProcess, start_relay

PACKAGE = Path(__file__).resolve().parents[2] / "buzz-sync-js"
NODE = shutil.which("node")

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(NODE is None, reason="node is not installed"),
]


def node_command() -> list[str]:
    """node, with the WebSocket built in (a flag before Node 22), after checking that the
    package is installed and built (bin/bootstrap test does both)."""
    assert NODE is not None
    assert (PACKAGE / "node_modules" / "nostr-tools").is_dir(), "run bin/bootstrap test (npm ci)"
    sources = max(path.stat().st_mtime for path in (PACKAGE / "src").glob("*.ts"))
    built = PACKAGE / "dist" / "index.js"
    if not built.exists() or built.stat().st_mtime < sources:
        subprocess.run([str(PACKAGE / "node_modules" / ".bin" / "tsc"), "-p", "tsconfig.json"],
                       cwd=PACKAGE, check=True)
    version = subprocess.run([NODE, "--version"], capture_output=True, text=True, check=True)
    major = int(version.stdout.strip().lstrip("v").split(".")[0])
    return [NODE, "--experimental-websocket"] if major < 22 else [NODE]


class Operator:
    """What the Node tests ask of the relay's operator."""

    def __init__(self, relay: RelayProcess, tmp: Path) -> None:
        self.relay = relay
        self.tmp = tmp
        self.limited: RelayProcess | None = None
        self.original_key = os.environ["RELAY_SIGNING_KEY"]

    def restart(self, overrides: dict[str, str | None]) -> dict[str, Any]:
        """The relay again on its port. This process's own sessions announce the key it now
        holds (readiness item 4: every writer holds the same key), so the relay stays ready
        and the rotation is what the reader's next page sees."""
        key = overrides["RELAY_SIGNING_KEY"] or self.original_key
        prefix = settings.RELAY_APPLICATION_NAME.rsplit("key=", 1)[0]
        name = f"{prefix}key={pubkey_from_secret(key)[:8]}"
        connections["default"].settings_dict["OPTIONS"]["application_name"] = name
        close_with_pool(connections["default"])  # the pool's sessions too
        port = self.relay.port
        self.relay.stop()
        # Sessions this process opened outside Django's pool (earlier tests' asyncio pools and
        # connections, still open until collected) announce the key they were opened with; the
        # relay would count them as writers holding another key and stay not ready.
        with connections["default"].cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND application_name LIKE %s AND application_name <> %s",
                [prefix.replace("%", r"\%").replace("_", r"\_") + "key=%", name],
            )
        self.relay = start_relay(overrides, port=port)
        _wait_until_incremental(self.relay.url)
        return {"url": self.relay.url}

    def handle(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        if action == "bump-epoch":
            return {"epoch": bump_epoch(reason="buzz-sync-js test")}
        if action == "rotate-key":
            return self.restart({"RELAY_SIGNING_KEY": "77" * 32,
                                 "RELAY_PREVIOUS_SIGNING_KEYS": self.original_key})
        if action == "restore-key":
            return self.restart({"RELAY_SIGNING_KEY": self.original_key,
                                 "RELAY_PREVIOUS_SIGNING_KEYS": None})
        if action == "limited-relay":
            self.limited = start_relay({"RELAY_RATE_LIMIT_PUBKEY_RATE": "1",
                                        "RELAY_RATE_LIMIT_PUBKEY_BURST": "2"})
            return {"url": self.limited.url}
        if action == "stop-limited-relay":
            if self.limited is not None:
                self.limited.stop()
                self.limited = None
            return {}
        if action == "buzz-sync":
            # buzz-sync (Python) keeps its own collection of the same relay, for parity.
            with Syncer(relay_url=self.relay.url, secret_hex=body["secret"],
                        db=self.tmp / f"{body['name']}.sqlite",
                        page_limit=body.get("page_limit")) as syncer:
                rounds = [syncer.run_round().as_dict() for _ in range(body.get("rounds", 1))]
                return {"heads": syncer.heads(), "rounds": rounds}
        raise LookupError(action)

    def close(self) -> None:
        if self.limited is not None:
            self.limited.stop()
        self.relay.stop()


def _wait_until_incremental(url: str, seconds: float = 20.0) -> None:
    """A restarted relay advertises `artifacts.incremental` only once its readiness refresher has
    seen every writer's session announce the new key; until then a client rightly runs full rounds
    without a reset (seen once in CI under load). The tests that follow a restart are about what
    a ready relay does with old tokens, so they start once it says it is ready."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            answer = httpx.get(url, headers={"Accept": "application/nostr+json"}, timeout=2)
            document = answer.json()
        except (httpx.HTTPError, ValueError):
            document = {}
        if "artifacts.incremental" in document.get("supported_extensions", []):
            return
        time.sleep(0.2)


def serve(handle: Callable[[str, dict[str, Any]], dict[str, Any]]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                answer, status = handle(self.path.strip("/"),
                                        orjson.loads(self.rfile.read(length) or b"{}")), 200
            except Exception as exc:  # reported to the Node test that asked
                answer, status = {"error": f"{type(exc).__name__}: {exc}"}, 500
            finally:
                connections.close_all()  # this thread's database connection
            payload = orjson.dumps(answer)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def operator(django_db_setup: None, tmp_path: Path) -> Iterator[Operator]:
    found = Operator(start_relay(), tmp_path)
    try:
        yield found
    finally:
        found.close()


def run_node_tests(operator: Operator, tmp_path: Path, files: list[str]) -> None:
    alice = make_key()
    # The relay URL's host names the community; Alice is its admin (she creates the channels).
    make_community(host="127.0.0.1", admins=[alice])
    server = serve(operator.handle)
    # Each request of the control endpoint opens its own session; this thread's is closed so
    # that a key rotation renames every session of this process.
    close_with_pool(connections["default"])
    try:
        env = {**os.environ, "BUZZ_RELAY_URL": operator.relay.url,
               "BUZZ_ALICE_SECRET": alice.secret,
               "BUZZ_CONTROL_URL": f"http://127.0.0.1:{server.server_address[1]}",
               "BUZZ_TMP": str(tmp_path)}
        # BUZZ_NODE_TEST_PATTERN: run only the Node tests whose names match (while developing).
        pattern = os.environ.get("BUZZ_NODE_TEST_PATTERN")
        run = subprocess.run(
            [*node_command(), "--test", "--test-concurrency=1", "--test-reporter=spec",
             *([f"--test-name-pattern={pattern}"] if pattern else []), *files],
            cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=600,
        )
    finally:
        server.shutdown()
        connections["default"].settings_dict["OPTIONS"]["application_name"] = (
            settings.RELAY_APPLICATION_NAME
        )
        close_with_pool(connections["default"])
    assert run.returncode == 0, (run.stdout + run.stderr)[-20000:]
    print(run.stdout[-6000:])  # what ran (pytest -s shows it)


def test_the_package_s_node_tests_pass_against_the_relay(
    operator: Operator, tmp_path: Path
) -> None:
    files = sorted(str(path.relative_to(PACKAGE)) for path in (PACKAGE / "test").glob("*.test.mjs"))
    run_node_tests(operator, tmp_path, files)
