"""HTTP to one relay: NIP-11 discovery and ``POST /query`` with NIP-98, retried per the policy.

The relay resolves the community from the host it is addressed by (PROTOCOL.md section 1), so a
relay URL names both the deployment and the community; nothing in a request names it again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from buzzclient.backoff import RetryPolicy, parse_retry_after
from buzzclient.errors import (
    ProtocolViolation,
    RelayBusy,
    RelayRejected,
    RelayUnreachable,
    Unauthorized,
    UnknownCommunity,
)
from nostr.events import Event
from nostr.nip98 import make_nip98_header, normalize_url

logger = logging.getLogger("buzzclient")

NIP11_ACCEPT = "application/nostr+json"
EXT_INCREMENTAL = "artifacts.incremental"
EXT_SYNC = "artifacts.sync"
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
_WS_SCHEMES = {"ws": "http", "wss": "https"}


@dataclass(frozen=True)
class RelayAddress:
    """A relay URL reduced to what identifies it: ``http(s)://host[:port]`` and the host."""

    base_url: str  # scheme://host[:port] (default port dropped), no trailing slash
    host: str  # lowercase, without port: the community the relay serves at this URL

    @classmethod
    def parse(cls, url: str) -> RelayAddress:
        """Accepts http(s) and ws(s) URLs with an empty or ``/`` path; raises ``ValueError``."""
        scheme, sep, rest = url.strip().partition("://")
        if sep and scheme.lower() in _WS_SCHEMES:
            url = f"{_WS_SCHEMES[scheme.lower()]}://{rest}"
        normalized = normalize_url(url.strip())
        parts = urlsplit(normalized)
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError("a relay URL names a scheme and host only, like http://127.0.0.1:8000")
        return cls(base_url=f"{parts.scheme}://{parts.netloc}", host=parts.hostname or "")

    def url(self, path: str) -> str:
        return self.base_url + (path if path.startswith("/") else "/" + path)

    def ws_url(self, path: str = "/") -> str:
        scheme, rest = self.base_url.split("://", 1)
        path = path if path.startswith("/") else "/" + path
        return f"{'wss' if scheme == 'https' else 'ws'}://{rest}{path}"


@dataclass(frozen=True)
class RelayInfo:
    """What NIP-11 says about the community at this URL (PROTOCOL.md section 6)."""

    incremental: bool
    query_endpoint: str
    max_limit: int
    # The relay serves `view_changes: "incremental"` (channels gained and lost without a reset).
    incremental_view_changes: bool
    sync: bool
    sync_endpoint: str
    pubkey: str | None
    document: dict[str, Any] = field(compare=False, repr=False)

    @property
    def name(self) -> str | None:
        """The community's NIP-11 ``name``: what the URL's host serves."""
        name = self.document.get("name")
        return name if isinstance(name, str) and name.strip() else None

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> RelayInfo:
        extensions = document.get("supported_extensions")
        if not isinstance(extensions, list):
            extensions = []
        artifacts = document.get("artifacts")
        artifacts = artifacts if isinstance(artifacts, dict) else {}
        incremental = artifacts.get("incremental")
        incremental = incremental if isinstance(incremental, dict) else {}
        sync = artifacts.get("sync")
        sync = sync if isinstance(sync, dict) else {}
        limitation = document.get("limitation")
        limitation = limitation if isinstance(limitation, dict) else {}
        max_limit = incremental.get("max_limit", limitation.get("max_limit", 1000))
        if not isinstance(max_limit, int) or isinstance(max_limit, bool) or max_limit < 1:
            max_limit = 1000
        pubkey = document.get("pubkey")
        return cls(
            # Both places must say so: the extension list is what NIP-11 readers look at, the
            # object carries the endpoint.
            incremental=EXT_INCREMENTAL in extensions and bool(incremental),
            query_endpoint=_path(incremental.get("endpoint"), "/query"),
            max_limit=max_limit,
            incremental_view_changes=isinstance(incremental.get("view_changes"), list)
            and "incremental" in incremental["view_changes"],
            sync=EXT_SYNC in extensions,
            sync_endpoint=_path(sync.get("endpoint"), "/"),
            pubkey=pubkey if isinstance(pubkey, str) else None,
            document=document,
        )


def _path(value: object, default: str) -> str:
    return value if isinstance(value, str) and value.startswith("/") else default


@dataclass
class TransportStats:
    requests: int = 0
    rate_limited: int = 0  # 429 answers honoured
    busy: int = 0  # 503 answers and transport failures retried
    waited: float = 0.0  # seconds slept before retries
    retry_after: list[float] = field(default_factory=list)  # Retry-After values honoured


class RelayHttp:
    """One relay, one reader key. ``client`` may be any ``httpx.Client`` (a test can pass one
    with ``httpx.WSGITransport`` to reach an in-process Django relay)."""

    def __init__(
        self,
        address: RelayAddress,
        secret_hex: str,
        *,
        client: httpx.Client | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.address = address
        self.secret = secret_hex
        self._own_client = client is None
        self.client = client or httpx.Client(timeout=DEFAULT_TIMEOUT)
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self.stats = TransportStats()

    def close(self) -> None:
        if self._own_client:
            self.client.close()

    def __enter__(self) -> RelayHttp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def relay_info(self) -> RelayInfo:
        """The NIP-11 document of the community at this URL."""
        response = self._send("GET", "/", None)
        document = _json_body(response)
        if not isinstance(document, dict):
            raise ProtocolViolation(f"{self.address.base_url}: NIP-11 document is not an object")
        info = RelayInfo.from_document(document)
        logger.info(
            "relay answered NIP-11: community %r, incremental rounds %s, live stream %s",
            info.name, "on" if info.incremental else "off", "on" if info.sync else "off",
        )
        return info

    def query(self, filter_: dict[str, Any], *, endpoint: str = "/query") -> bytes:
        """``POST`` one filter; the raw 200 body (the caller parses and validates it)."""
        body = orjson.dumps([filter_])
        return self._send("POST", endpoint, body).content

    def publish(self, event: Event) -> tuple[bool, str]:
        """``POST /event`` (PROTOCOL.md section 4): ``(accepted, message)`` of the relay's
        ``OK`` answer, e.g. ``(False, "restricted: ...")``. Signed NIP-98 with this key, so the
        event's author must be this key."""
        answer = _json_body(self._send("POST", "/event", event.raw.encode()))
        if not (isinstance(answer, list) and len(answer) == 4 and answer[0] == "OK"
                and isinstance(answer[2], bool) and isinstance(answer[3], str)):
            raise ProtocolViolation(f"{self.address.base_url}/event answered {answer!r:.200}")
        logger.info("relay answered: %s", orjson.dumps(answer).decode())
        return answer[2], answer[3]

    def _send(self, method: str, path: str, body: bytes | None) -> httpx.Response:
        url = self.address.url(path)
        failures = rate_limited = 0
        while True:
            headers = {"Accept": NIP11_ACCEPT if method == "GET" else "application/json"}
            if body is not None:
                headers["Content-Type"] = "application/json"
                # A fresh event per attempt: the relay accepts each NIP-98 event id once.
                headers["Authorization"] = make_nip98_header(
                    self.secret, url=url, method=method, body=body
                )
            self.stats.requests += 1
            try:
                response = self.client.request(method, url, content=body, headers=headers)
            except httpx.TransportError as exc:
                failures += 1
                limit = self.retry.max_attempts
                if isinstance(exc, httpx.ConnectError):
                    limit = min(limit, self.retry.connect_attempts)
                if failures >= limit:
                    raise RelayUnreachable(
                        f"cannot reach relay {self.address.base_url}: {_describe(exc)}"
                    ) from None
                self._wait(self.retry.backoff(failures), f"{_describe(exc)}, retrying")
                continue
            status = response.status_code
            if status == 429:
                rate_limited += 1
                wait = parse_retry_after(response.headers.get("Retry-After"))
                if rate_limited > self.retry.max_rate_limited or (
                    wait is not None and wait > self.retry.cap
                ):
                    raise RelayBusy(
                        f"relay {self.address.base_url} keeps rate-limiting this key "
                        f"(Retry-After {response.headers.get('Retry-After')})"
                    )
                self.stats.rate_limited += 1
                if wait is None:
                    wait = self.retry.backoff(rate_limited)
                else:
                    self.stats.retry_after.append(wait)
                self._wait(wait, "rate limited (429)")
                continue
            if status in (502, 503, 504):
                failures += 1
                if failures >= self.retry.max_attempts:
                    raise RelayBusy(
                        f"relay {self.address.base_url} is busy or unavailable "
                        f"(HTTP {status} {_error_code(response)}) after {failures} attempts"
                    )
                self.stats.busy += 1
                hinted = parse_retry_after(response.headers.get("Retry-After")) or 0.0
                wait = max(min(hinted, self.retry.cap), self.retry.backoff(failures))
                self._wait(wait, f"HTTP {status} {_error_code(response)}, backing off")
                continue
            if status == 200:
                return response
            self._raise_for(response)

    def _wait(self, seconds: float, why: str) -> None:
        logger.info("%s: waiting %.2f s", why, seconds)
        self.stats.waited += seconds
        self._sleep(seconds)

    def _raise_for(self, response: httpx.Response) -> None:
        code, message = _error_fields(response)
        base = self.address.base_url
        if response.status_code == 401:
            raise Unauthorized(f"relay {base} refused our key (401): {message or code}")
        if response.status_code == 404 and code == "unknown_community":
            raise UnknownCommunity(
                f"no community is served at {self.address.host} on relay {base} (404)"
            )
        raise RelayRejected(response.status_code, code, message)


def _json_body(response: httpx.Response) -> Any:
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        raise ProtocolViolation(
            f"{response.request.url}: answer is not JSON (HTTP {response.status_code})"
        ) from None


def _error_fields(response: httpx.Response) -> tuple[str, str]:
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return "non_json_error", response.text[:200].strip()
    if not isinstance(body, dict):
        return "non_json_error", response.text[:200].strip()
    return str(body.get("error", "error")), str(body.get("message", ""))


def _error_code(response: httpx.Response) -> str:
    return _error_fields(response)[0]


def _describe(exc: httpx.TransportError) -> str:
    if isinstance(exc, httpx.ConnectError):
        return f"connection failed ({exc})"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"
