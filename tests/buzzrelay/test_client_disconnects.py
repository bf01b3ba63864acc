"""A client that leaves mid-request is a normal event (issue 20): nothing is logged as an
unhandled error, no executor is torn down, and a write is either committed (and visible to the
next reader) or not stored at all; the relay goes on serving."""

from __future__ import annotations

import socket
import time
import uuid
from typing import Any

import httpx
import orjson
import pytest

from artifacts.models import Event as StoredEvent
from tests.factories import (
    artifact_tags,
    make_channel,
    make_community,
    make_key,
    nip98_header,
    signed_event,
)
from tests.relay_server import RelayProcess

pytestmark = pytest.mark.django_db(transaction=True)

# What the relay's log must never hold after a client left (uvicorn's and the relay's words for
# an error that escaped, asgiref's for a torn-down executor).
UNHANDLED = ("unhandled error", "Exception in ASGI application", "Traceback",
             "CurrentThreadExecutor", "I/O operation on closed file")


def request_bytes(relay: RelayProcess, path: str, body: bytes, authorization: str,
                  *, declared: int | None = None) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{relay.port}\r\n"
        f"Content-Type: application/json\r\nAuthorization: {authorization}\r\n"
        f"Content-Length: {len(body) if declared is None else declared}\r\n\r\n"
    )
    return head.encode() + body


def send_and_leave(relay: RelayProcess, raw: bytes, *, wait: float = 0.0) -> None:
    """Send `raw` and close the connection (after `wait` seconds) without reading an answer;
    SO_LINGER 0 makes the close a reset, as a killed client's is."""
    with socket.create_connection(("127.0.0.1", relay.port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.sendall(raw)
        if wait:
            time.sleep(wait)


def test_clients_leaving_mid_request_leave_no_error_and_no_lost_or_half_write(
    relay_server: RelayProcess,
) -> None:
    relay = relay_server
    community = make_community("127.0.0.1")
    author = make_key()
    h = make_channel(community, owner=author)
    url = f"{relay.url}/event"
    left: list[dict[str, Any]] = []
    for attempt in range(12):
        event = signed_event(author, 45010, artifact_tags(op="create", d=str(uuid.uuid4()), h=h),
                             "{}")
        body = orjson.dumps(event)
        authorization = nip98_header(author, url, "POST", body)
        if attempt % 3 == 0:  # mid-body: the declared length never arrives
            raw = request_bytes(relay, "/event", body[: len(body) // 2], authorization,
                                declared=len(body))
        else:  # the whole request, then gone before (or while) the write is answered
            raw = request_bytes(relay, "/event", body, authorization)
        send_and_leave(relay, raw, wait=0.0 if attempt % 3 == 1 else 0.02)
        left.append(event)
    # Rounds abandoned too.
    query = orjson.dumps([{"artifact": "current", "limit": 50}])
    for _ in range(4):
        send_and_leave(relay, request_bytes(
            relay, "/query", query, nip98_header(author, f"{relay.url}/query", "POST", query)))
    time.sleep(1.0)  # whatever was under way finishes
    # Still serving, on every path.
    assert httpx.get(f"{relay.url}/healthz").status_code == 200
    follow = signed_event(author, 45010, artifact_tags(op="create", d=str(uuid.uuid4()), h=h),
                          "{}")
    body = orjson.dumps(follow)
    answer = httpx.post(url, content=body, headers={
        "Content-Type": "application/json", "Authorization": nip98_header(author, url, "POST",
                                                                          body)})
    assert answer.status_code == 200 and answer.json()[2] is True, answer.text
    # No half-write: every event the relay stored is the one sent, whole, and a reader sees
    # it; none of the mid-body ones (they never arrived whole) is stored.
    sent = {event["id"]: event for event in left}
    stored = dict(StoredEvent.objects.filter(event_id__in=sent).values_list("event_id", "raw"))
    assert not stored.keys() & {left[i]["id"] for i in range(0, 12, 3)}
    # A write whose request arrived whole is carried through, not cancelled with its client
    # (a retry then finds it stored: `duplicate:`).
    assert {left[i]["id"] for i in range(2, 12, 3)} <= stored.keys()
    for event_id, text in stored.items():
        assert orjson.loads(text) == sent[event_id]
    page = httpx.post(f"{relay.url}/query", content=query, headers={
        "Content-Type": "application/json",
        "Authorization": nip98_header(author, f"{relay.url}/query", "POST", query)}).json()
    assert stored.keys() <= {event["id"] for event in page}
    log = relay.log()
    for words in UNHANDLED:
        assert words not in log, (words, log[-3000:])
