"""A request served by the front door leaves no reference cycle behind (relaycore/edge/).

DRF's request holds itself and the view in its parser context, and a rendered DRF response
holds itself and the view in its renderer context. Left so, every request's objects (the view,
both requests, the response, a round's cursor) wait for the cyclic garbage collector instead of
being freed when the answer is sent, and under load the collector ran ten times as often
(docs/performance.md). `RelayAPIView.respond` breaks both cycles once the response is final.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from rest_framework.request import Request
from rest_framework.response import Response

from artifacts.selectors.async_reads import connection_pool
from buzzrelay.asgi import relay_http
from relaycore.edge.views import RelayAPIView
from relaycore.redis_clients import async_redis_client
from tests.factories import Key, make_community, make_key, nip98_header

pytestmark = pytest.mark.django_db(transaction=True)
HOST = "team.example"


def collect_for_good() -> None:
    """Free every cycle now (with DEBUG_SAVEALL on, a collection only moves them to garbage)."""
    debug = gc.get_debug()
    gc.set_debug(0)
    gc.garbage.clear()
    gc.collect()
    gc.set_debug(debug)


@pytest.fixture
def saved_garbage() -> Iterator[list[Any]]:
    """What the collector would free, kept for inspection (automatic collection is off)."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        collect_for_good()
        gc.set_debug(0)
        gc.enable()


def in_cycles(garbage: list[Any]) -> list[str]:
    gc.collect()
    edge = (RelayAPIView, Request, Response)
    return sorted(type(o).__name__ for o in garbage if isinstance(o, edge))


async def asgi_call(app: Any, method: str, path: str, body: bytes = b"",
                    headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 80),
        "headers": [(b"host", HOST.encode()), (b"content-length", str(len(body)).encode()),
                    *((k.lower().encode(), v.encode()) for k, v in (headers or {}).items())],
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    answer: dict[str, Any] = {"body": b""}

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # the client stays connected
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        else:
            answer["body"] += message.get("body", b"")

    await app(scope, receive, send)
    return answer["status"], answer["body"]


async def serve_requests(reader: Key, garbage: list[Any]) -> list[str]:
    app = relay_http()
    progress = None

    async def one_of_each() -> None:
        nonlocal progress
        body = orjson.dumps([{"artifact": "current", "progress": progress}])
        status, page = await asgi_call(app, "POST", "/query", body, {
            "Content-Type": "application/json",
            "Authorization": nip98_header(reader, f"http://{HOST}/query", "POST", body)})
        assert status == 200, page
        progress = orjson.loads(page)["progress"]
        status, _ = await asgi_call(app, "GET", "/info", headers={
            "Accept": "application/nostr+json"})
        assert status == 200
        status, refusal = await asgi_call(app, "POST", "/query", body)  # no NIP-98: 401
        assert status == 401, refusal

    try:
        await one_of_each()  # connects this loop's PostgreSQL pool and Redis client
        collect_for_good()  # what connecting left in cycles is the clients' own
        for _ in range(3):
            await one_of_each()
        return in_cycles(garbage)
    finally:
        await (await connection_pool()).close()
        await async_redis_client().aclose()


def test_front_door_requests_leave_no_cycles(saved_garbage: list[Any]) -> None:
    make_community(HOST)
    assert asyncio.run(serve_requests(make_key(), saved_garbage)) == []


def test_the_check_finds_a_view_in_a_cycle(saved_garbage: list[Any]) -> None:
    """The test above can fail: a view kept in a cycle is found."""

    class Holder:
        view: RelayAPIView

    view, holder = RelayAPIView(), Holder()
    holder.view = view
    view.holder = holder  # type: ignore[attr-defined]
    del view, holder
    assert in_cycles(saved_garbage) == ["RelayAPIView"]
