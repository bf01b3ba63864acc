"""A REQ's replay is produced as the connection drains (artifacts.ws.consumer, PROTOCOL.md
section 8): a client that reads, however slowly, gets every stored event and EOSE whatever the
replay's size; clients that read nothing cost the server a bounded amount each (RSS from /proc
of the real `serve` process) and are dropped. Issue 37, at CI scale: the channel holds ~7 MiB
of ~60 KB heads; the reader's relay has a 1 MiB outbox bound (small_outbox_settings), which a
replay queued at once passes seven times over; the non-readers' relay has the default bound
and a 2 s stall limit (tests/buzzrelay/bounded_settings.py). The full-size figures (48 MiB
channel, 8 clients) are bench/connection_bounds.py's.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from websockets.exceptions import ConnectionClosed

from tests.artifacts.ws.wsclient import NostrWs
from tests.factories import Key, artifact_tags, make_channel, make_community, make_key, write
from tests.relay_server import RelayProcess, start_relay

pytestmark = pytest.mark.django_db(transaction=True)

HEADS = 120
CONTENT = "x" * 60_000
MIB = 1024 * 1024


def _relay(settings: str) -> Iterator[RelayProcess]:
    relay = start_relay({"DJANGO_SETTINGS_MODULE": settings})
    try:
        yield relay
    finally:
        relay.stop()


@pytest.fixture
def small_outbox_relay() -> Iterator[RelayProcess]:
    yield from _relay("tests.artifacts.ws.small_outbox_settings")


@pytest.fixture
def bounded_relay() -> Iterator[RelayProcess]:
    yield from _relay("tests.buzzrelay.bounded_settings")


def _channel_of_large_heads() -> tuple[object, Key, str, list[str]]:
    community = make_community()
    alice = make_key()
    h = make_channel(community, owner=alice)
    base = int(time.time()) - 3600
    ids = []
    for n in range(HEADS):
        # Ten heads a second: equal created_at across page boundaries (the id breaks ties).
        tags = artifact_tags(op="create", d=str(uuid.uuid4()), h=h, title=f"t{n}")
        ids.append(write(community, alice, 45010, tags, CONTENT, created_at=base + n // 10)
                   .event_id)
    return community, alice, h, ids


def test_a_slow_reader_gets_the_whole_replay_then_eose_then_live_events(
    small_outbox_relay: RelayProcess,
) -> None:
    community, alice, h, ids = _channel_of_large_heads()
    reader = NostrWs(small_outbox_relay.port, max_queue=1, receive_buffer=16384, compression=False)
    reader.auth(alice)
    reader.req("r", {"kinds": [45010], "#h": [h], "limit": 1000})
    frames = [reader.recv()]
    # Mid-replay, a new artifact: it must come after EOSE (section 8), once.
    tags = artifact_tags(op="create", d=str(uuid.uuid4()), h=h, title="live")
    live = write(community, alice, 45010, tags, "live").event_id  # type: ignore[arg-type]
    while frames[-1][0] not in ("EOSE", "CLOSED"):
        time.sleep(0.002)  # slower than the relay can send: the socket stays full
        frames.append(reader.recv())
    assert frames[-1] == ["EOSE", "r"], frames[-1][:2]
    replayed = [f[2]["id"] for f in frames if f[0] == "EVENT"]
    # Every stored head once, newest first (created_at desc, id asc), none after EOSE's place.
    assert sorted(replayed) == sorted(ids) or sorted(replayed) == sorted([*ids, live])
    assert len(replayed) == len(set(replayed))
    if live not in replayed:
        assert reader.next_event("r")["id"] == live
    reader.close()


def test_clients_that_do_not_read_are_bounded_and_dropped(bounded_relay: RelayProcess) -> None:
    _, alice, h, _ = _channel_of_large_heads()
    warm = NostrWs(bounded_relay.port)
    warm.auth(alice)
    assert len(warm.replay("w", {"kinds": [45010], "#h": [h], "limit": 2})) == 2
    before = bounded_relay.rss()

    stuck = []
    for _ in range(4):
        ws = NostrWs(bounded_relay.port, max_queue=1, receive_buffer=16384, compression=False)
        ws.auth(alice)
        ws.req("r", {"kinds": [45010], "#h": [h], "limit": 1000})
        stuck.append(ws)
    peak = before
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        peak = max(peak, bounded_relay.rss())
        time.sleep(0.05)
    # Queued at once, each replay is ~7 MiB of frames (more in Python objects): 4 of them
    # would add well over 28 MiB. Produced as they drain: about a window and a page each.
    assert peak - before < 24 * MIB, (before, peak)

    # Reading nothing for the stall limit (2 s here), each is dropped before its EOSE.
    time.sleep(3)
    for ws in stuck:
        frames: list[list[object]] = []
        with pytest.raises((ConnectionClosed, ConnectionError)):
            while True:
                frames.append(ws.recv(timeout=10))
        assert ["EOSE", "r"] not in frames
    assert bounded_relay.rss() - before < 24 * MIB
    # The relay still serves the others.
    assert len(warm.replay("again", {"kinds": [45010], "#h": [h], "limit": 3})) == 3
    warm.close()
