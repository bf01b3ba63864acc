"""A client that stops reading never delays anyone else; its own outbox drops live events
(bounded memory) and, once it reads again, a NOTICE tells it to run an HTTP round."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.artifacts.ws.wsclient import NostrWs
from tests.factories import artifact_tags, make_channel, make_community, make_key, write
from tests.relay_server import start_relay

pytestmark = pytest.mark.django_db(transaction=True)

EVENTS = 150
CONTENT = "x" * 60_000  # ~60 KB per event: the relay's socket buffer (<= 4 MB) fills quickly


def test_slow_reader_loses_live_events_with_a_notice_and_blocks_nobody() -> None:
    community = make_community()
    alice = make_key()
    h = make_channel(community, owner=alice)
    relay = start_relay({"DJANGO_SETTINGS_MODULE": "tests.artifacts.ws.small_outbox_settings"})
    try:
        # No compression: every byte of the events crosses the socket.
        slow = NostrWs(relay.port, max_queue=1, receive_buffer=16384, compression=False)
        fast = NostrWs(relay.port)
        for ws in (slow, fast):
            ws.auth(alice)
            assert ws.replay("s", {"#h": [h]}) == []
        # From here `slow` does not read: its socket fills, then its outbox.

        written = []
        for n in range(EVENTS):
            tags = artifact_tags(op="create", d=str(uuid.uuid4()), h=h, title=f"t{n}")
            written.append(write(community, alice, 45010, tags, CONTENT).event_id)
            # The fast reader keeps up while the slow one is stuck.
            assert fast.next_event("s", timeout=5)["id"] == written[-1]

        received: list[str] = []
        notices: list[str] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not notices:
            try:
                frame = slow.recv(timeout=max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                break
            if frame[0] == "EVENT":
                received.append(frame[2]["id"])
            elif frame[0] == "NOTICE":
                notices.append(frame[1])
        assert notices, f"no NOTICE; {len(received)} of {EVENTS} events received"
        assert notices[0].startswith("error:") and "HTTP round" in notices[0]
        dropped = int(notices[0].split()[1])
        assert dropped > 0 and len(received) + dropped == EVENTS
        # What was delivered is in order, and the connection is alive.
        assert received == [i for i in written if i in set(received)]
        assert slow.replay("again", {"#h": [h], "limit": 1})[0]["id"] in written
        slow.close()
        fast.close()
    finally:
        relay.stop()
