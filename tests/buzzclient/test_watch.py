"""--watch: polling against a relay without `artifacts.sync` (the fake), live hints over the real
relay's WebSocket (a `buzz-sync --watch` subprocess whose poll interval is far too long to be
what delivers the change)."""

from __future__ import annotations

import queue
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import orjson
import pytest
from django.test import Client
from websockets.sync.server import ServerConnection
from websockets.sync.server import serve as ws_serve

from artifacts.models import ArtifactHead, Channel, ChannelMember
from buzzclient import RetryPolicy, Syncer
from buzzclient.errors import SyncError
from buzzclient.sync import RoundSummary
from buzzclient.watch import LiveHints, watch
from nostr.schnorr import generate_secret
from tests.buzzclient.fake_relay import serve
from tests.buzzclient.world import World
from tests.factories import make_channel
from tests.relay_server import ROOT, RelayProcess


def test_without_live_sync_it_polls_and_rides_out_errors(tmp_path: Path) -> None:
    reports: queue.Queue[RoundSummary] = queue.Queue()
    errors: list[SyncError] = []
    stop = threading.Event()
    channel = str(uuid.uuid4())
    with serve() as relay, Syncer(relay_url=relay.url, secret_hex=generate_secret(),
                                  db=tmp_path / "c.sqlite",
                                  retry=RetryPolicy(max_attempts=1)) as syncer:
        relay.create(channel, "first")
        thread = threading.Thread(target=watch, args=(syncer,), kwargs={
            "interval": 0.2, "report": reports.put, "on_error": errors.append, "stop": stop})
        thread.start()
        try:
            assert reports.get(timeout=10).added == 1
            relay.script = [(503, {}, {"error": "budget_exceeded"})]
            relay.create(channel, "second")
            while (summary := reports.get(timeout=10)).added == 0:
                pass
            assert summary.added == 1
            assert len(errors) == 1 and "busy" in str(errors[0])
            assert syncer.heads() == relay.readable()
        finally:
            stop.set()
            thread.join(10)
        assert not thread.is_alive()


def _watching(
    relay_server: RelayProcess, tmp_path: Path, world: World
) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    """A `buzz-sync --watch` of bob's whose poll (600 s) is far too slow to deliver a change,
    and the lines of its standard output."""
    key_file = tmp_path / "bob.key"
    key_file.write_text(world.bob.secret)
    child = subprocess.Popen(
        [sys.executable, "-m", "buzzclient.cli", "--relay", relay_server.url, "--key-file",
         str(key_file), "--db", str(tmp_path / "w.sqlite"), "--watch", "--interval", "600"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(child.stdout, lines), daemon=True).start()
    return child, lines


def _lines(stream: object, into: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line.rstrip("\n"))


def _next_summary(lines: queue.Queue[str], pattern: str, timeout: float) -> list[str]:
    deadline, seen = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            break
        seen.append(line)
        if pattern in line:
            return seen
    raise AssertionError(f"no {pattern!r} within {timeout} s; saw {seen}")


def _drain(lines: queue.Queue[str]) -> list[str]:
    drained = []
    while True:
        try:
            drained.append(lines.get_nowait())
        except queue.Empty:
            return drained


@pytest.mark.django_db(transaction=True)
def test_live_events_trigger_rounds(relay_server: RelayProcess, tmp_path: Path) -> None:
    world = World()
    world.create(world.open_h, 3)
    child, lines = _watching(relay_server, tmp_path, world)
    try:
        _next_summary(lines, "+3 added", timeout=30)
        # Startup: the live subscription's own round comes and goes; after that only a live
        # event can start a round before the 600 s poll.
        time.sleep(3)
        _drain(lines)
        d = world.create(world.member_h)[0]
        # The round a hint starts holds the write (read-your-writes): no follow-up round.
        arrived = _next_summary(lines, "round:", timeout=10)[-1]
        assert arrived.count("+1 added") == 1
        assert re.match(r"\d\d:\d\d:\d\d continuation round: ", arrived), arrived
        world.delete(d)
        assert _next_summary(lines, "round:", timeout=10)[-1].count("-1 removed") == 1
        time.sleep(2)
        assert not [line for line in _drain(lines) if "round:" in line]
    finally:
        child.terminate()
        child.wait(10)
    status = child.stderr.read() if child.stderr else ""
    assert child.returncode in (130, -15), status
    # It said what it waits for, when: the start, the live stream, what wakes it.
    ws_url = relay_server.url.replace("http://", "ws://") + "/"
    assert re.search(rf"^buzz-sync: \d\d:\d\d:\d\d watching {relay_server.url} \(Ctrl-C stops\)$",
                     status, re.M), status
    assert re.search(
        rf"^buzz-sync: \d\d:\d\d:\d\d live stream subscribed \({ws_url}, every readable "
        r"channel\): waiting for changes, with a poll every 600 s as a safety net$", status, re.M
    ), status


@pytest.mark.django_db(transaction=True)
def test_console_actions_trigger_rounds(
    relay_server: RelayProcess, tmp_path: Path, admin_client: Client
) -> None:
    """A console redaction, member removal and channel deletion (relay-signed staff actions,
    PROTOCOL.md section 2) each start a round before the 600 s poll, as a person's would: the
    redaction as a live 9005, the others as the access hints of section 8."""
    world = World()
    kept = world.create(world.open_h, 2)
    world.create(world.member_h)
    doomed_h = make_channel(world.community, owner=world.alice, name="doomed")
    world.create(doomed_h)
    child, lines = _watching(relay_server, tmp_path, world)

    def console(path: str, action: str, pk: int) -> None:
        response = admin_client.post(path, {"action": action, "_selected_action": [pk],
                                            "index": 0})
        assert response.status_code == 302

    try:
        _next_summary(lines, "+4 added", timeout=30)
        time.sleep(3)
        _drain(lines)
        head = ArtifactHead.objects.get(community=world.community, artifact_id=kept[0])
        console("/admin/artifacts/artifacthead/", "redact_heads", head.pk)
        assert "-1 removed" in _next_summary(lines, "round:", timeout=10)[-1]
        member = ChannelMember.objects.get(community=world.community,
                                           channel_id=world.member_h, pubkey=world.bob.pubkey)
        console("/admin/artifacts/channelmember/", "remove_members", member.pk)
        assert "-1 removed" in _next_summary(lines, "-1 removed", timeout=10)[-1]
        channel = Channel.objects.get(community=world.community, channel_id=doomed_h)
        console("/admin/artifacts/channel/", "channel_delete", channel.pk)
        assert "-1 removed" in _next_summary(lines, "-1 removed", timeout=10)[-1]
    finally:
        child.terminate()
        child.wait(10)


def test_a_relay_that_refuses_live_redactions_still_gets_the_other_kinds() -> None:
    """A relay from before redactions were served live answers a REQ naming 9005 with
    `CLOSED "blocked: ..."`: the watcher subscribes again without it (a stub relay, websockets'
    own server, speaking just enough NIP-01 and NIP-42)."""
    asked: list[list[int]] = []

    def relay(connection: ServerConnection) -> None:
        connection.send('["AUTH","challenge"]')
        for raw in connection:
            message = orjson.loads(raw)
            if message[0] == "AUTH":
                connection.send(orjson.dumps(["OK", message[1]["id"], True, ""]).decode())
            elif message[0] == "REQ":
                kinds = message[2]["kinds"]
                asked.append(kinds)
                answer = (["CLOSED", message[1], "blocked: kind 9005 is not served here"]
                          if 9005 in kinds else ["EOSE", message[1]])
                connection.send(orjson.dumps(answer).decode())

    hints: list[str] = []
    with ws_serve(relay, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        port = server.socket.getsockname()[1]
        live = LiveHints(f"ws://127.0.0.1:{port}/", generate_secret(), on_hint=hints.append,
                         retry=RetryPolicy(base=0.05, cap=0.05))
        live.start()
        try:
            deadline = time.monotonic() + 10
            while len(asked) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)  # the second subscription stays: no third REQ
        finally:
            live.stop()
            live.join(5)
            server.shutdown()
    assert asked == [[45010, 45011, 9005], [45010, 45011]]
    assert live.kinds == [45010, 45011]
