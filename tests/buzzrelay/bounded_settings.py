"""Settings of a relay server whose time limits are short enough to reach in a test: the
WebSocket stall limit and the request head timeout (relaycore.connection_limits). Used by
tests/buzzrelay/test_connection_limits_server.py and
tests/artifacts/ws/test_replay_backpressure_server.py."""

from buzzrelay.settings import *  # noqa: F403

RELAY_WS_STALL_SECONDS = 2.0
RELAY_HEAD_TIMEOUT_SECONDS = 1.0
