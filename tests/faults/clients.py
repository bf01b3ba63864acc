"""Clients of a relay under test: signed HTTP (NIP-98), WebSocket (NIP-42) and a synced collection.

Black-box: they speak PROTOCOL.md over the wire and import nothing of the relay's own code, so
the fault, fleet, security and soak tests judge the relay only by what it answers.
"""

from __future__ import annotations

import contextlib
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from nostr.events import sign_event
from nostr.nip42 import make_auth_event
from nostr.nip98 import make_nip98_header
from nostr.schnorr import generate_secret, pubkey_from_secret
from tests.faults.deployment import HOST


class Client:
    """A pubkey talking to one relay over HTTP with NIP-98 (a fresh nonce per request).

    `host` names the community (the Host header and the signed URL); the connection always
    goes to the relay's loopback address.
    """

    def __init__(self, base_url: str, secret: str | None = None, *, host: str | None = None,
                 timeout: float = 15) -> None:
        self.base_url = base_url
        self.host = host
        self.secret = secret or generate_secret()
        self.pubkey = pubkey_from_secret(self.secret)
        self.http = httpx.Client(timeout=timeout)

    def with_host(self, host: str) -> Client:
        """The same pubkey addressing another community (another Host header)."""
        return Client(self.base_url, self.secret, host=host)

    def signed_url(self, path: str) -> str:
        url = f"{self.base_url}{path}"
        return url if self.host is None else url.replace(f"//{HOST}:", f"//{self.host}:", 1)

    def headers(self) -> dict[str, str]:
        if self.host is None:
            return {}
        return {"Host": self.signed_url("/").split("//", 1)[1].rstrip("/")}

    def get(self, path: str, **headers: str) -> httpx.Response:
        return self.http.get(f"{self.base_url}{path}", headers={**self.headers(), **headers})

    def post(self, path: str, payload: Any, *, authorization: str | None = None
             ) -> httpx.Response:
        body = payload if isinstance(payload, bytes) else orjson.dumps(payload)
        headers = {"Content-Type": "application/json", **self.headers()}
        headers["Authorization"] = authorization or make_nip98_header(
            self.secret, url=self.signed_url(path), method="POST", body=body
        )
        return self.http.post(f"{self.base_url}{path}", content=body, headers=headers)

    def sign(self, kind: int, tags: list[list[str]], content: str = "") -> dict[str, Any]:
        return sign_event(self.secret, kind=kind, tags=tags, content=content)

    def publish(self, event: dict[str, Any]) -> list[Any]:
        response = self.post("/event", event)
        assert response.status_code == 200, (response.status_code, response.text)
        answer = response.json()
        assert isinstance(answer, list)
        return answer

    def query(self, filter_: dict[str, Any]) -> httpx.Response:
        return self.post("/query", [filter_])

    # Event builders for the protocol's kinds (PROTOCOL.md section 2).

    def create_channel(self, *, private: bool = False, name: str = "c") -> str:
        channel = str(uuid.uuid4())
        tags = [["h", channel], ["name", name]] + ([["private"]] if private else [])
        answer = self.publish(self.sign(9007, tags))
        assert answer[2] is True, answer
        return channel

    def put_member(self, channel: str, pubkey: str, role: str = "member") -> list[Any]:
        return self.publish(self.sign(9000, [["h", channel], ["p", pubkey, role]]))

    def remove_member(self, channel: str, pubkey: str) -> list[Any]:
        return self.publish(self.sign(9001, [["h", channel], ["p", pubkey]]))

    def artifact(self, channel: str, *, op: str = "create", d: str | None = None,
                 prev: str | None = None, title: str = "t", type_: str = "buzz.task",
                 content: str = "") -> dict[str, Any]:
        tags = [["ar", "1"], ["d", d or str(uuid.uuid4())], ["h", channel], ["type", type_],
                ["op", op]]
        if prev:
            tags.append(["prev", prev])
        if op != "delete":
            tags.append(["title", title])
        return self.sign(45010, tags, content)

    def close(self) -> None:
        self.http.close()


def d_of(event: dict[str, Any]) -> str:
    return next(tag[1] for tag in event["tags"] if tag[0] == "d")


class WsClient:
    """One WebSocket to a relay, authenticated (NIP-42) as every secret given."""

    def __init__(self, port: int, secrets: list[str], *, host: str = HOST) -> None:
        self.url = f"ws://{host}:{port}/"
        sock = socket.create_connection((HOST, port), timeout=10)
        self.ws: ClientConnection = connect(self.url, sock=sock, open_timeout=10,
                                            max_size=2**20, legacy=True)
        challenge = self._expect(lambda m: m[0] == "AUTH")[1]
        for secret in secrets:
            event = make_auth_event(secret, challenge=challenge, relay_url=self.url)
            self.send(["AUTH", event])
            answer = self._expect(lambda m, i=event["id"]: m[0] == "OK" and m[1] == i)
            assert answer[2] is True, answer

    def send(self, message: list[Any]) -> None:
        self.ws.send(orjson.dumps(message).decode())

    def recv(self, timeout: float = 5) -> list[Any] | None:
        """The next message, or None when nothing arrives within `timeout`."""
        try:
            text = self.ws.recv(timeout=timeout)
        except TimeoutError:
            return None
        message = orjson.loads(text)
        assert isinstance(message, list)
        return message

    def recv_text(self, timeout: float = 5) -> str | None:
        try:
            text = self.ws.recv(timeout=timeout)
        except TimeoutError:
            return None
        return text if isinstance(text, str) else text.decode()

    def _expect(self, match: Any, timeout: float = 10) -> list[Any]:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            message = self.recv(left)
            if message is not None and match(message):
                return message
        raise AssertionError("expected message did not arrive")

    def req(self, sub_id: str, *filters: dict[str, Any]) -> list[list[Any]]:
        """Send a REQ; every message up to its EOSE or CLOSED (inclusive)."""
        self.send(["REQ", sub_id, *filters])
        messages = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            message = self.recv(deadline - time.monotonic())
            if message is None:
                break
            messages.append(message)
            if message[0] in ("EOSE", "CLOSED") and message[1] == sub_id:
                return messages
        raise AssertionError(f"no EOSE/CLOSED for {sub_id}: {messages}")

    def close(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            self.ws.close()


@dataclass
class Collection:
    """A reader's local collection kept by incremental rounds (PROTOCOL.md section 5)."""

    client: Client
    filter: dict[str, Any] = field(default_factory=dict)
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    progress: str | None = None
    resets: int = 0
    pages: list[dict[str, Any]] = field(default_factory=list)
    keep_pages: bool = False
    # The last applied page had `more: true`: `progress` resumes a round begun earlier, whose T
    # is that round's first page's (PROTOCOL.md section 5, "Resumed rounds").
    mid_round: bool = False

    def round(self, *, max_pages: int = 1000, retry_unavailable: bool = False) -> None:
        """Run pages until `more` is false, applying each (upsert and delete by `d`).

        `retry_unavailable`: a page answered 503 `database_unavailable` is asked again, as the
        contract says ("retry later"); for rounds right after the database restarted, when a
        pooled connection it broke may fail its first statement."""
        retries = 20 if retry_unavailable else 0
        for _ in range(max_pages):
            body = {"artifact": "current", **self.filter, "progress": self.progress}
            response = self.client.post("/query", [body])
            while (response.status_code == 503 and retries > 0
                   and response.json().get("error") == "database_unavailable"):
                retries -= 1
                time.sleep(0.1)
                response = self.client.post("/query", [body])
            assert response.status_code == 200, (response.status_code, response.text)
            page = response.json()
            if self.keep_pages:
                self.pages.append(page)
            if page["reset"]:
                self.items.clear()
                self.resets += 1
            for event in page["events"]:
                self.items[d_of(event)] = event
            for removal in page["removed"]:
                self.items.pop(removal["d"], None)
            self.progress = page["progress"]
            self.mid_round = page["more"]
            if not page["more"]:
                return
        raise AssertionError("round did not finish")

    def catch_up(self, *, retry_unavailable: bool = False) -> None:
        """Rounds that see every write acknowledged before this call: the relay reads each
        round's fence afresh (PROTOCOL.md section 5, read-your-writes). A collection left in the
        middle of a round (a page failed: a fault) first finishes that round, which keeps its
        first page's T, older than this call; then one more round, begun now, covers the rest
        ("Resumed rounds"). One round alone missed the changes stamped between the two: the
        chaos run's divergences after a PostgreSQL restart (docs/reliability.md section 12)."""
        resumed = self.mid_round
        self.round(retry_unavailable=retry_unavailable)
        if resumed:
            self.round(retry_unavailable=retry_unavailable)

    def ids(self) -> dict[str, str]:
        return {d: event["id"] for d, event in self.items.items()}


def fresh_full_read(client: Client, filter_: dict[str, Any] | None = None) -> dict[str, str]:
    """What a brand-new collection holds after one full round: {d: head event id}."""
    collection = Collection(client, dict(filter_ or {}))
    collection.catch_up()
    return collection.ids()
