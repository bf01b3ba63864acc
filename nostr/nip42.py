"""NIP-42 client authentication to a relay: a signed kind-22242 event answering a challenge."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
from nostr.kinds import KIND_CLIENT_AUTH
from nostr.nip98 import normalize_url

__all__ = [
    "KIND_CLIENT_AUTH",
    "WS_DEFAULT_PORTS",
    "Nip42Error",
    "make_auth",
    "make_auth_event",
    "normalize_relay_url",
    "verify_auth_event",
]

WS_DEFAULT_PORTS: Mapping[str, int] = {"ws": 80, "wss": 443}
# The relay may know its public URL as http(s) (RELAY_PUBLIC_URL): the WebSocket on the same
# host and port is the ws(s) URL of the same origin.
_WS_SCHEME_FOR = {"http": "ws", "https": "wss"}


class Nip42Error(ValueError):
    """Authentication failed; ``str()`` is the reason to send back."""


def normalize_relay_url(url: str) -> str:
    """Canonical relay URL: ws/wss (http/https mapped onto them), lowercase host, default
    port dropped, trailing slashes ignored. Raises ``ValueError`` for anything else."""
    scheme, sep, rest = url.partition(":")
    if sep:
        url = f"{_WS_SCHEME_FOR.get(scheme.lower(), scheme)}:{rest}"
    return normalize_url(url, default_ports=WS_DEFAULT_PORTS, ignore_trailing_slash=True)


def verify_auth_event(
    event: bytes | bytearray | memoryview | str | dict[str, Any],
    *,
    challenge: str,
    relay_url: str,
    now: int,
    window: int = 600,
) -> str:
    """Check an AUTH event against this connection's challenge; returns the pubkey.

    ``event`` is the JSON text or the strictly parsed object from ``["AUTH", <event>]``.
    Raises ``Nip42Error``; the signature is verified last, after every cheap check.
    """
    limits = EventLimits(created_at_lower=window, created_at_upper=window)
    try:
        parsed, event_id = parse_event_unverified(event, now=now, limits=limits)
    except InvalidEvent as exc:
        raise Nip42Error(f"invalid auth event: {exc}") from None
    if parsed.kind != KIND_CLIENT_AUTH:
        raise Nip42Error(f"auth event kind must be {KIND_CLIENT_AUTH}")
    signed_challenge = _one_tag_or_none(parsed, "challenge")
    if signed_challenge is None:
        raise Nip42Error("auth event needs exactly one challenge tag")
    if signed_challenge != challenge:
        raise Nip42Error("auth event challenge does not match")
    _check_relay(parsed, relay_url)
    try:
        check_signature(parsed, event_id)
    except InvalidEvent as exc:
        raise Nip42Error(f"invalid auth event: {exc}") from None
    return parsed.pubkey


def make_auth_event(
    secret_hex: str, *, challenge: str, relay_url: str, created_at: int | None = None
) -> dict[str, Any]:
    """A signed AUTH event answering ``challenge`` for the relay at ``relay_url``, as the NIP-01
    object a client puts in ``["AUTH", <event>]``."""
    return make_auth(
        secret_hex, challenge=challenge, relay_url=relay_url, created_at=created_at
    ).to_dict()


def make_auth(
    secret_hex: str, *, challenge: str, relay_url: str, created_at: int | None = None
) -> Event:
    """The signed AUTH ``Event`` answering ``challenge`` for the relay at ``relay_url``."""
    return sign(
        secret_hex,
        kind=KIND_CLIENT_AUTH,
        tags=[["relay", relay_url], ["challenge", challenge]],
        content="",
        created_at=created_at,
    )


def _one_tag_or_none(event: Event, name: str) -> str | None:
    try:
        return single_tag_value(event, name)
    except DuplicateTag:
        # Several would let two readers disagree on the value: refused as "needs exactly one".
        return None


def _check_relay(event: Event, relay_url: str) -> None:
    signed_url = _one_tag_or_none(event, "relay")
    if signed_url is None:
        raise Nip42Error("auth event needs exactly one relay tag")
    try:
        signed = normalize_relay_url(signed_url)
    except ValueError:
        raise Nip42Error("auth event relay tag is not a valid relay URL") from None
    try:
        expected = normalize_relay_url(relay_url)
    except ValueError:
        # relay_url may be derived from the client's Host header: refuse, never crash.
        raise Nip42Error("this relay's URL is not a valid relay URL") from None
    if signed != expected:
        raise Nip42Error("auth event relay tag does not name this relay")
