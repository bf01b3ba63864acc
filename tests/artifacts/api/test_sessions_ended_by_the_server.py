"""Sessions the server ended (a restart, a failover, an operator's pg_terminate_backend) are
replaced before the next request, not discovered by it (PROTOCOL.md section 9: 503 only while
the database is unavailable).

Both pools of a served relay skip their round-trip check for connections in steady use; the
server's message on an ending session is what tells them. Each test ends every session of the
relay at once, while they are in steady use, and the very next requests must succeed.
"""

from __future__ import annotations

import time
import uuid

import httpx
import orjson
import pytest
from django.db import connection

from tests.artifacts.api.test_read_your_writes import round_from, served
from tests.factories import artifact_tags, make_channel, make_community, make_key, signed_event
from tests.relay_server import RelayProcess

pytestmark = pytest.mark.django_db(transaction=True)


def end_every_other_session() -> int:
    """pg_terminate_backend for every client session of this database but ours."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'"
        )
        ended: int = cursor.fetchone()[0]
    return ended


def test_rounds_writes_and_nip11_right_after_every_session_ended(
    relay_server: RelayProcess,
) -> None:
    relay = relay_server
    send = served(relay)
    community = make_community("127.0.0.1")
    author, reader = make_key(), make_key()
    h = make_channel(community, owner=author)
    _, progress = round_from(send, reader, None)
    for attempt in range(3):
        # Steady use: every pooled connection of the relay was used in the last second.
        for _ in range(8):
            _, progress = round_from(send, reader, progress)
            assert httpx.get(f"{relay.url}/", headers={"Accept": "application/nostr+json"}
                             ).status_code == 200
        assert end_every_other_session() > 0
        time.sleep(0.05)  # the terminated backends' messages reach the relay's sockets
        event = signed_event(author, 45010, artifact_tags(op="create", d=str(uuid.uuid4()), h=h),
                             "{}")
        status, ok = send("/event", author, event)
        assert status == 200 and ok[:3] == ["OK", event["id"], True], (attempt, ok)
        delivered, progress = round_from(send, reader, progress)
        assert event["id"] in delivered.values(), attempt
        info = httpx.get(f"{relay.url}/", headers={"Accept": "application/nostr+json"})
        assert info.status_code == 200, (attempt, info.text)
        assert orjson.loads(info.content)["supported_nips"]
