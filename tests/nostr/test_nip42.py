"""NIP-42 AUTH events: challenge, relay URL, time window, signature."""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nostr import schnorr
from nostr.events import sign_event
from nostr.nip42 import Nip42Error, make_auth_event, normalize_relay_url, verify_auth_event

SECRET = "5a1f0e0d2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6"
PUBKEY = schnorr.pubkey_from_secret(SECRET)
NOW = 1_700_000_000
CHALLENGE = "c2a1b3d4e5f60718"
RELAY = "wss://relay.example"


def _auth(
    tags: list[list[str]] | None = None, *, kind: int = 22242, created_at: int = NOW
) -> dict[str, Any]:
    if tags is None:
        tags = [["relay", RELAY], ["challenge", CHALLENGE]]
    return sign_event(SECRET, kind=kind, tags=tags, content="", created_at=created_at)


def _verify(event: Any, *, relay_url: str = RELAY, challenge: str = CHALLENGE) -> str:
    return verify_auth_event(event, challenge=challenge, relay_url=relay_url, now=NOW)


def _refused(event: Any, **context: Any) -> str:
    with pytest.raises(Nip42Error) as caught:
        _verify(event, **context)
    return str(caught.value)


# --- accepted ---------------------------------------------------------------------------------


def test_event_made_by_the_helper_is_accepted_as_object_and_as_text() -> None:
    event = make_auth_event(SECRET, challenge=CHALLENGE, relay_url=RELAY, created_at=NOW)
    assert _verify(event) == PUBKEY
    assert _verify(orjson.dumps(event)) == PUBKEY
    assert _verify(orjson.dumps(event).decode()) == PUBKEY


@pytest.mark.parametrize(
    ("signed", "relay_url"),
    [
        ("wss://relay.example/", "wss://relay.example"),
        ("wss://relay.example", "wss://relay.example/"),
        ("WSS://Relay.Example:443", "wss://relay.example"),
        ("ws://relay.example:80/", "ws://relay.example"),
        ("wss://relay.example:7447", "wss://relay.example:7447/"),
        ("wss://relay.example/nostr/", "wss://relay.example/nostr"),
        # The relay may know its public URL as https: the WebSocket is wss on the same origin.
        ("wss://relay.example", "https://relay.example"),
        ("ws://relay.example:8000", "http://relay.example:8000/"),
    ],
)
def test_equivalent_relay_urls_are_accepted(signed: str, relay_url: str) -> None:
    event = _auth([["relay", signed], ["challenge", CHALLENGE]])
    assert _verify(event, relay_url=relay_url) == PUBKEY


def test_created_at_window_is_inclusive_both_ways() -> None:
    assert _verify(_auth(created_at=NOW - 600)) == PUBKEY
    assert _verify(_auth(created_at=NOW + 600)) == PUBKEY


def test_tag_order_and_extra_tags_do_not_matter() -> None:
    event = _auth([["challenge", CHALLENGE], ["client", "x"], ["relay", RELAY]])
    assert _verify(event) == PUBKEY


# --- refused ----------------------------------------------------------------------------------


def test_wrong_challenge_is_refused() -> None:
    assert _refused(_auth(), challenge="other") == "auth event challenge does not match"
    event = _auth([["relay", RELAY], ["challenge", CHALLENGE.upper()]])
    assert _refused(event) == "auth event challenge does not match"


@pytest.mark.parametrize(
    "tags",
    [
        [["relay", RELAY]],
        [["relay", RELAY], ["challenge"]],
        [["relay", RELAY], ["challenge", CHALLENGE], ["challenge", "other"]],
    ],
)
def test_missing_or_repeated_challenge_is_refused(tags: list[list[str]]) -> None:
    assert _refused(_auth(tags)) == "auth event needs exactly one challenge tag"


@pytest.mark.parametrize(
    "signed",
    [
        "wss://other.example",
        "wss://relay.example:7447",
        "ws://relay.example",
        "wss://relay.example/other",
        "wss://relay.example/?x=1",
    ],
)
def test_other_relay_is_refused(signed: str) -> None:
    event = _auth([["relay", signed], ["challenge", CHALLENGE]])
    assert _refused(event) == "auth event relay tag does not name this relay"


@pytest.mark.parametrize("signed", ["relay.example", "ftp://relay.example", "wss://", "wss://a b"])
def test_relay_tag_that_is_not_a_url_is_refused(signed: str) -> None:
    event = _auth([["relay", signed], ["challenge", CHALLENGE]])
    assert _refused(event) == "auth event relay tag is not a valid relay URL"


def test_unusable_relay_url_is_refused_not_crashed() -> None:
    reason = _refused(_auth(), relay_url="wss://relay.example:99999")
    assert reason == "this relay's URL is not a valid relay URL"


def test_missing_or_repeated_relay_is_refused() -> None:
    assert _refused(_auth([["challenge", CHALLENGE]])) == "auth event needs exactly one relay tag"
    doubled = [["relay", RELAY], ["relay", "wss://other.example"], ["challenge", CHALLENGE]]
    assert _refused(_auth(doubled)) == "auth event needs exactly one relay tag"


def test_wrong_kind_is_refused() -> None:
    assert _refused(_auth(kind=27235)) == "auth event kind must be 22242"


def test_stale_and_future_events_are_refused() -> None:
    assert _refused(_auth(created_at=NOW - 601)) == "invalid auth event: created_at too old"
    assert _refused(_auth(created_at=NOW + 601)) == (
        "invalid auth event: created_at too far in the future"
    )


def test_window_is_configurable() -> None:
    event = _auth(created_at=NOW - 30)
    with pytest.raises(Nip42Error):
        verify_auth_event(event, challenge=CHALLENGE, relay_url=RELAY, now=NOW, window=10)


def test_bad_signature_is_refused() -> None:
    event = _auth()
    event["sig"] = _auth(created_at=NOW - 1)["sig"]
    assert _refused(event) == "invalid auth event: bad signature"


def test_tampered_challenge_is_refused() -> None:
    event = _auth()
    event["tags"] = [["relay", RELAY], ["challenge", "stolen"]]
    assert _refused(event, challenge="stolen") == "invalid auth event: bad event id"


@pytest.mark.parametrize("raw", [b"", b"[]", b'{"kind":22242}', b"\xff"])
def test_malformed_events_are_refused(raw: bytes) -> None:
    assert _refused(raw).startswith("invalid auth event: ")


def test_normalize_relay_url() -> None:
    assert normalize_relay_url("WSS://Relay.Example:443/") == "wss://relay.example"
    assert normalize_relay_url("https://relay.example/nostr/") == "wss://relay.example/nostr"
    with pytest.raises(ValueError):
        normalize_relay_url("relay.example")


# --- properties -------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    tags=st.lists(
        st.lists(
            st.sampled_from(["relay", "challenge", RELAY, CHALLENGE, "wss://[", "", "x"]),
            min_size=1,
            max_size=3,
        ),
        max_size=4,
    ),
    kind=st.sampled_from([22242, 1]),
    skew=st.integers(-1200, 1200),
)
def test_arbitrary_auth_events_raise_only_nip42_error(
    tags: list[list[str]], kind: int, skew: int
) -> None:
    with contextlib.suppress(Nip42Error):
        assert _verify(_auth(tags, kind=kind, created_at=NOW + skew)) == PUBKEY


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=100) | st.dictionaries(st.text(max_size=8), st.text(), max_size=8))
def test_arbitrary_input_raises_only_nip42_error(raw: Any) -> None:
    with contextlib.suppress(Nip42Error):
        _verify(raw)
