"""NIP-98 HTTP authentication: ``Authorization: Nostr <base64 of a signed kind-27235 event>``.

Verification follows PROTOCOL.md section 3. Replay detection is the caller's job (it claims
``Nip98Auth.event_id`` once within the window); everything here is pure.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from nostr.events import (
    DuplicateTag,
    Event,
    EventLimits,
    InvalidEvent,
    check_signature,
    parse_event_unverified,
    sign,
    single_tag_value,
)
from nostr.jsonstrict import StrictJSONError, loads_keeping_last_duplicate
from nostr.kinds import KIND_HTTP_AUTH

__all__ = [
    "HTTP_DEFAULT_PORTS",
    "KIND_HTTP_AUTH",
    "Nip98Auth",
    "Nip98Error",
    "claimed_pubkey",
    "make_nip98_header",
    "normalize_url",
    "verify_nip98",
]

HTTP_DEFAULT_PORTS: Mapping[str, int] = {"http": 80, "https": 443}
_EMPTY_BODY_SHA256 = hashlib.sha256(b"").hexdigest()
_NOT_URL_CHARS = re.compile(r"[^\x21-\x7e]")


def _auth_limits(window: int) -> EventLimits:
    # The auth event's own window replaces the 1 year / 15 minutes of stored events.
    return EventLimits(created_at_lower=window, created_at_upper=window)


_LIMITS_60S = _auth_limits(60)  # immutable; spares building one per request


class Nip98Error(ValueError):
    """Authentication failed; ``str()`` is the reason for the 401 body."""


@dataclass(frozen=True, slots=True)
class Nip98Auth:
    """A verified NIP-98 authorization: who signed it and which event to claim against replay."""

    pubkey: str
    event_id: str
    created_at: int


def normalize_url(
    url: str,
    *,
    default_ports: Mapping[str, int] = HTTP_DEFAULT_PORTS,
    ignore_trailing_slash: bool = False,
) -> str:
    """Canonical form for comparing URLs: lowercase scheme and host, default port dropped.

    Path, query and fragment are kept byte for byte (PROTOCOL.md compares them exactly); an
    empty path becomes ``/`` (the same resource for http(s) and ws(s)), and a bare ``?`` is
    dropped (servers do not tell it from no query). ``ignore_trailing_slash`` (NIP-42 relay
    URLs) removes trailing slashes from the path. Raises ``ValueError`` for URLs with a scheme
    outside ``default_ports``, no host, user info, a bad port, spaces or non-ASCII characters.
    """
    if _NOT_URL_CHARS.search(url):
        # urlsplit silently drops tabs and newlines and strips spaces, which would make two
        # different strings compare equal; and str.lower() maps some non-ASCII letters onto
        # ASCII ones (KELVIN SIGN -> "k"). Request URLs are percent-encoded ASCII anyway.
        raise ValueError("URL must be printable ASCII without spaces")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in default_ports:
        raise ValueError(f"URL scheme must be one of {', '.join(sorted(default_ports))}")
    host = parts.hostname  # already lowercased by urlsplit
    if not host or parts.username is not None or parts.password is not None:
        raise ValueError("URL must name a host and no user")
    port = parts.port  # raises ValueError when not a number in range
    if ":" in host:
        host = f"[{host}]"  # IPv6 literal
    netloc = host if port is None or port == default_ports[scheme] else f"{host}:{port}"
    path = parts.path.rstrip("/") if ignore_trailing_slash else parts.path or "/"
    normalized = f"{scheme}://{netloc}{path}"
    if parts.query:
        normalized += f"?{parts.query}"
    if parts.fragment:
        normalized += f"#{parts.fragment}"
    return normalized


def verify_nip98(
    authorization: str | None,
    *,
    url: str,
    method: str,
    body: bytes | None,
    now: int,
    max_header_bytes: int = 2048,
    window: int = 60,
) -> Nip98Auth:
    """Check an ``Authorization`` header against the request; raises ``Nip98Error``.

    ``url`` is the absolute URL of the request as the relay publicly serves it. Every check
    runs before the signature, so a stale or misdirected event costs no verification.
    """
    event_json = _decode_header(authorization, max_header_bytes)
    limits = _LIMITS_60S if window == 60 else _auth_limits(window)
    try:
        event, event_id = parse_event_unverified(event_json, now=now, limits=limits)
    except InvalidEvent as exc:
        raise Nip98Error(f"invalid auth event: {exc}") from None
    if event.kind != KIND_HTTP_AUTH:
        raise Nip98Error(f"auth event kind must be {KIND_HTTP_AUTH}")
    _check_url(event, url)
    _check_method(event, method)
    _check_payload(event, body)
    try:
        check_signature(event, event_id)
    except InvalidEvent as exc:
        raise Nip98Error(f"invalid auth event: {exc}") from None
    return Nip98Auth(pubkey=event.pubkey, event_id=event.id, created_at=event.created_at)


def claimed_pubkey(authorization: str | None, *, max_header_bytes: int = 2048) -> str | None:
    """The public key the header's auth event names, checked by nothing: a guess, for work a
    verifier may start before the header is verified (and must discard unless
    ``verify_nip98`` then returns the same key). None when the header has no such key."""
    try:
        event = loads_keeping_last_duplicate(_decode_header(authorization, max_header_bytes))
    except (Nip98Error, StrictJSONError):
        return None
    pubkey = event.get("pubkey") if isinstance(event, dict) else None
    return pubkey if isinstance(pubkey, str) and len(pubkey) == 64 else None


def make_nip98_header(
    secret_hex: str,
    *,
    url: str,
    method: str,
    body: bytes | None = None,
    created_at: int | None = None,
    extra_tags: Iterable[Sequence[str]] = (),
    nonce: bool = True,
) -> str:
    """A complete ``Authorization`` header value for one request.

    A random ``nonce`` tag is added by default: the relay accepts each event id once, so two
    identical requests within a second would otherwise carry the same event and be refused.
    """
    tags: list[list[str]] = [["u", url], ["method", method.upper()]]
    if body:
        tags.append(["payload", hashlib.sha256(body).hexdigest()])
    if nonce:
        tags.append(["nonce", secrets.token_hex(16)])
    tags.extend(list(tag) for tag in extra_tags)
    event = sign(secret_hex, kind=KIND_HTTP_AUTH, tags=tags, content="", created_at=created_at)
    return "Nostr " + base64.b64encode(event.raw.encode()).decode("ascii")


def _decode_header(authorization: str | None, max_header_bytes: int) -> bytes:
    if authorization is None:
        raise Nip98Error("missing Authorization header")
    # Checked on characters first so an oversized header is never encoded or decoded; once
    # it is known to be ASCII, characters and bytes are the same count.
    if len(authorization) > max_header_bytes:
        raise Nip98Error(f"Authorization header too large (max {max_header_bytes} bytes)")
    if not authorization.isascii():
        raise Nip98Error("malformed Authorization header")
    if not authorization.strip():
        raise Nip98Error("missing Authorization header")
    scheme, *credentials = authorization.split(None, 1)
    # Authentication schemes are case-insensitive (RFC 9110 section 11.1).
    if scheme.lower() != "nostr":
        raise Nip98Error("Authorization scheme must be Nostr")
    if not credentials:
        raise Nip98Error("missing auth event")
    token = credentials[0].strip()
    if "-" in token or "_" in token:  # URL-safe alphabet (str.translate is slow here)
        token = token.replace("-", "+").replace("_", "/")
    try:
        # validate=True refuses characters outside the alphabet instead of skipping them.
        return base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
    except binascii.Error:
        raise Nip98Error("auth event is not valid base64") from None


def _one_tag(event: Event, name: str) -> str | None:
    try:
        return single_tag_value(event, name)
    except DuplicateTag:
        # Two `u` (or `method`, `payload`) tags would let a verifier and a reader disagree.
        raise Nip98Error(f"auth event has more than one {name} tag") from None


@lru_cache(maxsize=512)
def _normalized_http_url(url: str) -> str:
    """`normalize_url` for http(s), remembered: a request's URL and the `u` tags its clients
    sign are a few strings said again and again, and parsing both cost 2% of a quiet round's
    relay CPU (`bench/profile_round.py`). Pure, so a cached answer is the same answer; a
    refused URL raises again every time (`lru_cache` keeps no exceptions)."""
    return normalize_url(url)


def _check_url(event: Event, url: str) -> None:
    signed_url = _one_tag(event, "u")
    if signed_url is None:
        raise Nip98Error("auth event has no u tag")
    # Both sides normalized, always: an exact-string shortcut would accept a `u` spelled as a
    # request URL built from a bad Host (`host:port@evil`) without ever parsing it.
    try:
        requested = _normalized_http_url(url)
    except ValueError:
        # The request URL is built from client input (the Host header may carry any port), so
        # an unusable one is the client's failure to authenticate, not a server error.
        raise Nip98Error("the request URL is not a valid http(s) URL") from None
    try:
        signed = _normalized_http_url(signed_url)
    except ValueError:
        raise Nip98Error("auth event u tag is not a valid http(s) URL") from None
    if signed != requested:
        raise Nip98Error("auth event u tag does not match the request URL")


def _check_method(event: Event, method: str) -> None:
    signed_method = _one_tag(event, "method")
    if signed_method is None:
        raise Nip98Error("auth event has no method tag")
    # ASCII only: str.upper() would also map e.g. "po\u017ft" (LONG S) onto "POST".
    if not signed_method.isascii() or signed_method.upper() != method.upper():
        raise Nip98Error("auth event method tag does not match the request method")


def _check_payload(event: Event, body: bytes | None) -> None:
    payload = _one_tag(event, "payload")
    if payload is None:
        if body:
            raise Nip98Error("auth event has no payload tag for the request body")
        return
    expected = hashlib.sha256(body).hexdigest() if body else _EMPTY_BODY_SHA256
    # Hex is a notation: an uppercase digest names the same bytes, so compare case-insensitively.
    if payload.lower() != expected:
        raise Nip98Error("auth event payload tag does not match the request body")
