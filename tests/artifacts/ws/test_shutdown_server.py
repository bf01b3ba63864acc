"""An instance that shuts down closes its WebSockets with 1001 ("going away") after flushing."""

from __future__ import annotations

import signal

import pytest

from tests.artifacts.ws.wsclient import NostrWs
from tests.factories import make_channel, make_community, make_key
from tests.relay_server import start_relay

pytestmark = pytest.mark.django_db(transaction=True)


def test_sigterm_closes_connections_with_going_away() -> None:
    community = make_community()
    alice = make_key()
    h = make_channel(community, owner=alice)
    relay = start_relay()
    try:
        subscribed, idle = NostrWs(relay.port), NostrWs(relay.port)
        subscribed.auth(alice)
        assert subscribed.replay("s", {"#h": [h]}) == []
        relay.process.send_signal(signal.SIGTERM)
        assert subscribed.closed_code() == 1001
        assert idle.closed_code() == 1001
        assert relay.process.wait(15) is not None
    finally:
        relay.stop()
