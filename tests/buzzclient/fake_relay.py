"""A small in-memory relay speaking PROTOCOL.md sections 3, 5 and 6, for the client's unit tests.

It is a fake of the *relay*, not of the client's code: a real HTTP server on 127.0.0.1 that
checks NIP-98 with the project's verifier, keeps heads under a change counter and serves full
and continuation rounds with opaque tokens, resets on a view change and can be told to answer
429, 503, 401 or ``invalid_progress``. The required end-to-end tests run against the real relay.
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from nostr.events import sign_event
from nostr.nip98 import Nip98Error, verify_nip98
from nostr.schnorr import generate_secret

AUTHOR = generate_secret()


def artifact_event(
    d: str, channel: str, *, title: str, op: str = "create", prev: str | None = None,
    type_: str = "buzz.task",
) -> dict[str, Any]:
    tags = [["ar", "1"], ["d", d], ["h", channel], ["type", type_], ["op", op], ["title", title]]
    if prev:
        tags.append(["prev", prev])
    return sign_event(AUTHOR, kind=45010, tags=tags, content=f"body of {title}")


def marker_event(d: str, source: str, prev: str) -> dict[str, Any]:
    tags = [["ar", "1"], ["d", d], ["h", source], ["reason", "moved"], ["prev", prev]]
    return sign_event(AUTHOR, kind=45011, tags=tags, content="")


@dataclass
class Head:
    seq: int
    event: dict[str, Any] | None  # None: not readable any more
    reason: str = "deleted"


@dataclass
class FakeRelay:
    incremental: bool = True
    sync: bool = False
    heads: dict[str, Head] = field(default_factory=dict)
    seq: int = 0
    view: int = 0  # bump to make every token's view digest stale
    script: list[tuple[int, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    sent_progress: list[str | None] = field(default_factory=list)
    auth_failures: list[str] = field(default_factory=list)
    pages_served: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- writes ---------------------------------------------------------------------------

    def put(self, d: str, event: dict[str, Any]) -> None:
        with self.lock:
            self.seq += 1
            self.heads[d] = Head(self.seq, event)

    def create(self, channel: str, title: str) -> str:
        d = str(uuid.uuid4())
        self.put(d, artifact_event(d, channel, title=title))
        return d

    def update(self, d: str, title: str) -> None:
        head = self.heads[d].event
        assert head is not None
        channel = next(t[1] for t in head["tags"] if t[0] == "h")
        self.put(d, artifact_event(d, channel, title=title, op="update", prev=head["id"]))

    def remove(self, d: str, reason: str = "deleted") -> None:
        with self.lock:
            self.seq += 1
            self.heads[d] = Head(self.seq, None, reason)

    def readable(self) -> dict[str, str]:
        return {d: h.event["id"] for d, h in self.heads.items() if h.event is not None}

    # -- reads ----------------------------------------------------------------------------

    def nip11(self) -> dict[str, Any]:
        extensions = (["artifacts.incremental"] if self.incremental else []) + (
            ["artifacts.sync"] if self.sync else []
        )
        artifacts: dict[str, Any] = {}
        if self.incremental:
            artifacts["incremental"] = {"endpoint": "/query", "overlap_seconds": 120,
                                        "max_limit": 1000}
        if self.sync:
            artifacts["sync"] = {"endpoint": "/", "kinds": [45010, 45011]}
        return {"name": "fake", "pubkey": "00" * 32, "supported_nips": [1, 11, 42, 98],
                "supported_extensions": extensions, "artifacts": artifacts,
                "limitation": {"max_limit": 1000}}

    def page(self, filter_: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            return self._page(filter_)

    def _page(self, filter_: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        limit = filter_.get("limit", 100)
        raw = filter_["progress"]
        self.sent_progress.append(raw)
        token = _decode(raw) if raw is not None else None
        if raw is not None and token is None:
            return 400, {"error": "invalid_progress", "message": "bad token"}
        if token is None or token["view"] != self.view:
            reset = True
            token = {"mode": "full", "lo": 0, "T": self.seq, "cursor": 0, "view": self.view}
        elif token["mode"] == "done":
            reset = False
            token = {"mode": "cont", "lo": token["T"], "T": self.seq, "cursor": token["T"],
                     "view": self.view}
        else:
            reset = False
        candidates = sorted(
            (h.seq, d) for d, h in self.heads.items() if token["cursor"] < h.seq <= token["T"]
        )
        events, removed = [], []
        for seq, d in candidates[:limit]:
            head = self.heads[d]
            if head.event is not None:
                events.append(head.event)
            elif token["mode"] == "cont":
                removed.append({"d": d, "reason": head.reason})
            token["cursor"] = seq
        more = len(candidates) > limit
        if not more:
            token = {"mode": "done", "T": token["T"], "view": self.view}
        self.pages_served += 1
        return 200, {"events": events, "removed": removed, "progress": _encode(token),
                     "more": more, "reset": reset}


def _encode(token: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(token)).decode().rstrip("=")


def _decode(raw: str) -> dict[str, Any] | None:
    try:
        token = orjson.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return None
    return token if isinstance(token, dict) and "mode" in token else None


def _handler(relay: FakeRelay) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = orjson.dumps(body)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if "application/nostr+json" not in self.headers.get("Accept", ""):
                self._send(200, {"hint": "ask with Accept: application/nostr+json"})
                return
            self._send(200, relay.nip11())

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                verify_nip98(self.headers.get("Authorization"), url=relay.url + self.path,
                             method="POST", body=body, now=int(time.time()))
            except Nip98Error as exc:
                relay.auth_failures.append(str(exc))
                self._send(401, {"error": "unauthorized", "message": str(exc)},
                           {"WWW-Authenticate": "Nostr"})
                return
            if relay.script:
                status, headers, answer = relay.script.pop(0)
                self._send(status, answer, headers)
                return
            filters = orjson.loads(body)
            status, answer = relay.page(filters[0])
            self._send(status, answer)

    return Handler


@contextmanager
def serve(relay: FakeRelay | None = None) -> Iterator[FakeRelay]:
    relay = relay or FakeRelay()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(relay))
    relay.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield relay
    finally:
        server.shutdown()
        server.server_close()
