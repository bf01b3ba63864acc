"""Settings of a relay server with tiny per-connection outboxes (slow-consumer tests)."""

from buzzrelay.settings import *  # noqa: F403

RELAY_WS_OUTBOX_MAX_LIVE = 20
RELAY_WS_OUTBOX_MAX_BYTES = 1024 * 1024
