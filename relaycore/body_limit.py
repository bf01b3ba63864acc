"""The request body limit, enforced while the body is read (PROTOCOL.md section 3: 413 first).

Django's ASGI handler reads a whole request body (into a spooled temporary file) before any
middleware or view runs, and a chunked body has no Content-Length to refuse it by: so a limit
checked in Django comes after the upload, and an over-long chunked body left as Django's HTML
400. This ASGI middleware sits in front of every HTTP application of the relay and reads the
body itself, stopping at `RELAY_MAX_BODY_BYTES` (64 KiB) and within `RELAY_BODY_TIMEOUT_SECONDS`
(a slow body is a held connection and buffer): the applications behind it receive the whole,
bounded body in one message. Hand-written because neither Django nor uvicorn bounds a body
while reading it.
"""

from __future__ import annotations

import asyncio

import orjson
from django.conf import settings

from relaycore.asgi_types import ASGIApp, Message, Receive, Scope, Send
from relaycore.http import CORS_HEADERS

__all__ = ["BodyTooLarge", "ClientDisconnected", "RequestBodyLimit", "read_body"]


_CORS = tuple((name.lower().encode(), value.encode()) for name, value in CORS_HEADERS.items())


class BodyTooLarge(Exception):
    pass


class ClientDisconnected(Exception):
    pass


class RequestBodyLimit:
    """ASGI middleware: reads each HTTP request's body up to the limit, or answers 413/408/400."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit: int = settings.RELAY_MAX_BODY_BYTES
        length = _content_length(scope)
        if length is not None:
            if not length.isdigit():
                await _refuse(send, 400, "bad_request", "Content-Length is not a number")
                return
            if int(length) > limit:
                await _refuse(send, 413, "payload_too_large", f"body over {limit} bytes")
                return
        try:
            async with asyncio.timeout(settings.RELAY_BODY_TIMEOUT_SECONDS):
                body = await read_body(receive, limit)
        except BodyTooLarge:
            await _refuse(send, 413, "payload_too_large", f"body over {limit} bytes")
            return
        except TimeoutError:
            await _refuse(
                send, 408, "request_timeout",
                f"the body did not arrive within {settings.RELAY_BODY_TIMEOUT_SECONDS} s",
            )
            return
        except ClientDisconnected:
            return  # nobody is left to answer
        await self.app(scope, _replaying(body, receive), send)


def _content_length(scope: Scope) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == b"content-length":
            return bytes(value).decode("latin-1").strip()
    return None


async def read_body(receive: Receive, limit: int) -> bytes:
    """The request's whole body; raises `BodyTooLarge` past `limit`, `ClientDisconnected` when the
    client leaves first."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """The application's receive: the whole body first, then the server's (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    body = orjson.dumps({"error": code, "message": message})
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        # The rest of the body is never read: the connection cannot carry another request.
        (b"connection", b"close"),
        *_CORS,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
