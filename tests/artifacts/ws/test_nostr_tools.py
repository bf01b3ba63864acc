"""An independent client: nostr-tools (npm) connects, authenticates with NIP-42, subscribes,
receives the replay and EOSE, publishes, and gets its event back live."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import orjson
import pytest

from tests.factories import create_artifact, make_channel, make_community, make_key
from tests.relay_server import RelayProcess

INTEROP = Path(__file__).resolve().parents[2] / "interop"
NODE = shutil.which("node")

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(NODE is None, reason="node is not installed"),
]


def _node_command() -> list[str]:
    assert NODE is not None
    if not (INTEROP / "node_modules" / "nostr-tools").is_dir():
        npm = shutil.which("npm")
        assert npm is not None, "npm is needed to install tests/interop (npm ci)"
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=INTEROP, check=True)
    version = subprocess.run([NODE, "--version"], capture_output=True, text=True, check=True)
    major = int(version.stdout.strip().lstrip("v").split(".")[0])
    # nostr-tools uses the global WebSocket, built in from Node 22 (a flag before).
    return [NODE, "--experimental-websocket"] if major < 22 else [NODE]


def test_nostr_tools_client_authenticates_subscribes_and_publishes(
    relay_server: RelayProcess,
) -> None:
    # nostr-tools connects to the URL it is given: the community is the loopback address.
    community = make_community(host="127.0.0.1")
    alice = make_key()
    h = make_channel(community, owner=alice)
    _, existing = create_artifact(community, alice, h)
    new_d = str(uuid.uuid4())

    run = subprocess.run(
        [*_node_command(), "ws_client.mjs", relay_server.ws_url, alice.secret, h, new_d],
        cwd=INTEROP, capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 0, run.stderr + run.stdout
    result = orjson.loads(run.stdout.strip().splitlines()[-1])
    assert result["beforeAuth"].startswith("auth-required:")
    assert result["auth"] == ""
    assert result["replayed"] == [existing]
    assert result["publishReason"] == ""
    assert result["live"] == result["published"]
