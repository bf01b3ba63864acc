"""Read-your-writes (PROTOCOL.md section 5): once `POST /event` has answered `OK`, a round started
at once includes the write.

Every round's first page reads the fence afresh (never a cached value), so no wait is needed
between the `OK` and the round. Each test repeats write-then-round many times without any sleep,
over both drivers of a page: Django's handler in this process (the synchronous `read_page`) and
a served relay (the asyncio `read_page_async`, whose first round trip reads the fence). The only
exception the contract allows, a transaction that began before the write and is still open, is
absent here: nothing else writes to the test database, and the relay's own bookkeeping runs in
single short statements.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
from django.test import Client

from artifacts.models import Community
from tests.artifacts.selectors.replica import tag
from tests.factories import (
    Key,
    artifact_tags,
    make_channel,
    make_community,
    make_key,
    nip98_header,
    signed_event,
    signed_post,
)
from tests.relay_server import RelayProcess

pytestmark = pytest.mark.django_db(transaction=True)

TRIES = 40
# Post one JSON body to a path, as a reader or author; answer (status, parsed body).
Send = Callable[[str, Key, Any], tuple[int, Any]]


def in_process(host: str) -> Send:
    def send(path: str, who: Key, body: Any) -> tuple[int, Any]:
        response = signed_post(Client(), path, who, body, host=host)
        return response.status_code, orjson.loads(response.content)

    return send


def served(relay: RelayProcess) -> Send:
    def send(path: str, who: Key, body: Any) -> tuple[int, Any]:
        raw = orjson.dumps(body)
        url = f"{relay.url}{path}"
        response = httpx.post(
            url, content=raw, timeout=30,
            headers={"Content-Type": "application/json",
                     "Authorization": nip98_header(who, url, "POST", raw)},
        )
        return response.status_code, response.json()

    return send


def round_from(send: Send, reader: Key, progress: str | None) -> tuple[dict[str, str], str]:
    """One whole round: (d -> head id of every event it delivered, the last token)."""
    delivered: dict[str, str] = {}
    while True:
        status, page = send(
            "/query", reader, [{"artifact": "current", "progress": progress, "limit": 50}]
        )
        assert status == 200, page
        delivered.update((tag(event, "d") or "", event["id"]) for event in page["events"])
        progress = page["progress"]
        if not page["more"]:
            return delivered, progress


def check_read_your_writes(send: Send, community: Community) -> None:
    author, reader = make_key(), make_key()
    h = make_channel(community, owner=author)
    _full, progress = round_from(send, reader, None)
    head: dict[str, str] = {}
    for attempt in range(TRIES):
        # Creates and updates alternate: a new head and a changed one, each written over HTTP.
        if attempt % 2 == 0 or not head:
            d, prev, op = str(uuid.uuid4()), None, "create"
        else:
            d, prev, op = next(iter(head)), next(iter(head.values())), "update"
        event = signed_event(author, 45010, artifact_tags(op=op, d=d, h=h, prev=prev), "{}")
        status, ok = send("/event", author, event)
        assert status == 200 and ok[:3] == ["OK", event["id"], True], ok
        delivered, progress = round_from(send, reader, progress)
        assert delivered.get(d) == event["id"], (attempt, op, "the round missed the write")
        head = {d: event["id"]}
    # A full round started at once holds the last write too.
    full, _ = round_from(send, reader, None)
    assert full[d] == event["id"]


def test_a_round_started_at_once_includes_the_write_in_process() -> None:
    check_read_your_writes(in_process("ryw.example"), make_community("ryw.example"))


def test_a_round_started_at_once_includes_the_write_on_a_served_relay(
    relay_server: RelayProcess,
) -> None:
    check_read_your_writes(served(relay_server), make_community("127.0.0.1"))
