"""NIP-98 HTTP authentication as PROTOCOL.md section 3 states it."""

from __future__ import annotations

import base64
import contextlib
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nostr import schnorr
from nostr.events import sign_event
from nostr.nip98 import (
    Nip98Auth,
    Nip98Error,
    claimed_pubkey,
    make_nip98_header,
    normalize_url,
    verify_nip98,
)

SECRET = "3b1e9a3c1ec6d4f3e0bd0e6bb0c2e5f9d0f1a2b3c4d5e6f708192a3b4c5d6e7f"
PUBKEY = schnorr.pubkey_from_secret(SECRET)
NOW = 1_700_000_000
URL = "https://relay.example/event"
BODY = b'{"kind": 45010}'


def _header(
    tags: Sequence[Sequence[str]],
    *,
    kind: int = 27235,
    created_at: int = NOW,
    encode: Callable[[bytes], bytes] = base64.b64encode,
) -> str:
    event = sign_event(SECRET, kind=kind, tags=tags, content="", created_at=created_at)
    return "Nostr " + encode(orjson.dumps(event)).decode()


def _post_tags(url: str = URL, method: str = "POST", body: bytes = BODY) -> list[list[str]]:
    return [["u", url], ["method", method], ["payload", hashlib.sha256(body).hexdigest()]]


def _verify(
    header: str | None,
    *,
    url: str = URL,
    method: str = "POST",
    body: bytes | None = BODY,
    now: int = NOW,
) -> Nip98Auth:
    return verify_nip98(header, url=url, method=method, body=body, now=now)


def _refused(header: str | None, **request: Any) -> str:
    with pytest.raises(Nip98Error) as caught:
        _verify(header, **request)
    return str(caught.value)


# --- accepted ---------------------------------------------------------------------------------


def test_header_made_by_the_helper_is_accepted() -> None:
    header = make_nip98_header(SECRET, url=URL, method="POST", body=BODY, created_at=NOW)
    auth = _verify(header)
    assert auth.pubkey == PUBKEY
    assert auth.created_at == NOW
    assert len(auth.event_id) == 64


def test_repeated_headers_differ_by_their_nonce() -> None:
    first = make_nip98_header(SECRET, url=URL, method="POST", body=BODY, created_at=NOW)
    second = make_nip98_header(SECRET, url=URL, method="POST", body=BODY, created_at=NOW)
    assert _verify(first).event_id != _verify(second).event_id


def test_without_nonce_identical_requests_carry_identical_events() -> None:
    def make() -> str:
        return make_nip98_header(
            SECRET, url=URL, method="GET", created_at=NOW, nonce=False, extra_tags=[["x", "1"]]
        )

    assert _verify(make(), method="GET", body=None).event_id == (
        _verify(make(), method="GET", body=None).event_id
    )


def test_lowercase_method_is_accepted() -> None:
    assert _verify(_header(_post_tags(method="post"))).pubkey == PUBKEY
    assert _verify(_header(_post_tags()), method="post").pubkey == PUBKEY


@pytest.mark.parametrize(
    ("signed", "requested"),
    [
        ("https://relay.example:443/event", "https://relay.example/event"),
        ("https://relay.example/event", "https://relay.example:443/event"),
        ("http://relay.example:80/event", "http://relay.example/event"),
        ("HTTPS://Relay.EXAMPLE/event", "https://relay.example/event"),
        ("https://relay.example:8443/event", "https://relay.example:8443/event"),
        ("https://relay.example/query?x=1&y=2", "https://relay.example/query?x=1&y=2"),
        ("https://relay.example", "https://relay.example/"),
        ("https://relay.example/event?", "https://relay.example/event"),
        ("https://[::1]:443/event", "https://[::1]/event"),
    ],
)
def test_equivalent_urls_are_accepted(signed: str, requested: str) -> None:
    assert _verify(_header(_post_tags(url=signed)), url=requested).pubkey == PUBKEY


def test_created_at_window_is_inclusive_both_ways() -> None:
    assert _verify(_header(_post_tags(), created_at=NOW - 60)).pubkey == PUBKEY
    assert _verify(_header(_post_tags(), created_at=NOW + 60)).pubkey == PUBKEY


def test_urlsafe_base64_without_padding_is_accepted() -> None:
    def urlsafe_unpadded(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    # Content chosen so that the standard encoding needs '+' or '/' and padding.
    for filler in ("", "a", "ab", "?>?>?>"):
        tags = [*_post_tags(), ["x", filler]]
        assert _verify(_header(tags, encode=urlsafe_unpadded)).pubkey == PUBKEY


def test_scheme_name_is_case_insensitive_and_spacing_tolerated() -> None:
    token = _header(_post_tags()).split(" ", 1)[1]
    assert _verify(f"nostr {token}").pubkey == PUBKEY
    assert _verify(f"NOSTR   {token}  ").pubkey == PUBKEY


def test_empty_body_needs_no_payload_but_a_present_one_must_match() -> None:
    get_tags = [["u", URL], ["method", "GET"]]
    for body in (None, b""):
        assert _verify(_header(get_tags), method="GET", body=body).pubkey == PUBKEY
        empty_hash = hashlib.sha256(b"").hexdigest()
        header = _header([*get_tags, ["payload", empty_hash]])
        assert _verify(header, method="GET", body=body).pubkey == PUBKEY
        wrong = _header([*get_tags, ["payload", hashlib.sha256(b"x").hexdigest()]])
        reason = _refused(wrong, method="GET", body=body)
        assert reason == "auth event payload tag does not match the request body"


def test_uppercase_payload_hash_is_accepted() -> None:
    tags = [["u", URL], ["method", "POST"], ["payload", hashlib.sha256(BODY).hexdigest().upper()]]
    assert _verify(_header(tags)).pubkey == PUBKEY


def test_extra_tags_are_ignored() -> None:
    assert _verify(_header([*_post_tags(), ["nonce", "abc"], ["client", "x"]])).pubkey == PUBKEY


# --- refused ----------------------------------------------------------------------------------

URL_MISMATCH = "auth event u tag does not match the request URL"


@pytest.mark.parametrize(
    ("signed", "requested"),
    [
        ("https://other.example/event", URL),  # other host
        ("https://relay.example.evil/event", URL),
        ("https://relay.example:8443/event", URL),  # other port
        ("https://relay.example/event", "https://relay.example:8443/event"),
        ("http://relay.example/event", URL),  # other scheme
        ("https://relay.example:80/event", URL),  # 80 is not https's default
        ("https://relay.example/query", URL),  # other path
        ("https://relay.example/event/", URL),
        ("https://relay.example/Event", URL),  # paths are case-sensitive
        ("https://relay.example/event%2F", URL),
        ("https://relay.example/query", "https://relay.example/query?x=1"),  # missing query
        ("https://relay.example/query?x=2", "https://relay.example/query?x=1"),
        ("https://relay.example/query?y=2&x=1", "https://relay.example/query?x=1&y=2"),
        ("https://relay.example/query?x=1", "https://relay.example/query"),
        ("https://relay.example/event#frag", URL),
    ],
)
def test_wrong_u_is_refused(signed: str, requested: str) -> None:
    assert _refused(_header(_post_tags(url=signed)), url=requested) == URL_MISMATCH


@pytest.mark.parametrize(
    "signed",
    [
        "/event",
        "relay.example/event",
        "wss://relay.example/event",
        "ftp://relay.example/event",
        "https://user:pw@relay.example/event",
        "https://relay.example:99999/event",
        "https://relay.example:x/event",
        "https://relay.example/ev ent",
        "https://relay.example/ev\tent",
        " https://relay.example/event",
        "https://[::1/event",
        "https:///event",
        "https://\u212aelay.example/event",  # KELVIN SIGN lowercases to "k"
        "https://relay.example/\u00e9vent",
    ],
)
def test_u_that_is_not_an_http_url_is_refused(signed: str) -> None:
    reason = _refused(_header(_post_tags(url=signed)))
    assert reason == "auth event u tag is not a valid http(s) URL"


@pytest.mark.parametrize(
    "requested", ["https://relay.example:99999/event", "https://relay.example:x/event"]
)
def test_unusable_request_url_is_refused_not_crashed(requested: str) -> None:
    # The request URL comes from the Host header, which a client controls.
    reason = _refused(_header(_post_tags()), url=requested)
    assert reason == "the request URL is not a valid http(s) URL"
    # Signed exactly as requested: still refused. The u tag is compared only after both
    # sides are normalized, so a token signed for such a URL authenticates nowhere.
    assert _refused(_header(_post_tags(url=requested)), url=requested) == reason


@pytest.mark.parametrize("requested", [
    "http://127.0.0.1:8000@evil.example/query",  # a Host with user info, as a relay rebuilt it
    "http://127.0.0.1:abc/query",
])
def test_a_u_spelled_like_a_bad_request_url_is_refused(requested: str) -> None:
    reason = _refused(_header(_post_tags(url=requested)), url=requested)
    assert reason == "the request URL is not a valid http(s) URL"


def test_missing_and_repeated_u_are_refused() -> None:
    assert _refused(_header(_post_tags()[1:])) == "auth event has no u tag"
    assert _refused(_header([["u"], *_post_tags()[1:]])) == "auth event has no u tag"
    doubled = [["u", "https://other.example/event"], *_post_tags()]
    assert _refused(_header(doubled)) == "auth event has more than one u tag"


def test_wrong_method_is_refused() -> None:
    reason = "auth event method tag does not match the request method"
    assert _refused(_header(_post_tags(method="GET"))) == reason
    assert _refused(_header(_post_tags(method="po\u017ft"))) == reason  # LONG S uppercases to S
    assert _refused(_header(_post_tags()), method="PUT") == reason
    assert _refused(_header([["u", URL], ["payload", hashlib.sha256(BODY).hexdigest()]])) == (
        "auth event has no method tag"
    )


def test_stale_created_at_is_refused() -> None:
    reason = _refused(_header(_post_tags(), created_at=NOW - 61))
    assert reason == "invalid auth event: created_at too old"


def test_future_created_at_is_refused() -> None:
    reason = _refused(_header(_post_tags(), created_at=NOW + 61))
    assert reason == "invalid auth event: created_at too far in the future"


def test_window_is_configurable() -> None:
    header = _header(_post_tags(), created_at=NOW - 100)
    auth = verify_nip98(header, url=URL, method="POST", body=BODY, now=NOW, window=120)
    assert auth.pubkey == PUBKEY


def test_missing_payload_for_a_body_is_refused() -> None:
    reason = _refused(_header(_post_tags()[:2]))
    assert reason == "auth event has no payload tag for the request body"


def test_payload_of_another_body_is_refused() -> None:
    reason = _refused(_header(_post_tags()), body=BODY + b" ")
    assert reason == "auth event payload tag does not match the request body"
    reason = _refused(_header(_post_tags(body=b"other")))
    assert reason == "auth event payload tag does not match the request body"


def test_oversized_header_is_refused() -> None:
    header = _header([*_post_tags(), ["x", "y" * 2000]])
    assert len(header) > 2048
    assert _refused(header) == "Authorization header too large (max 2048 bytes)"
    assert _refused("Nostr " + "A" * 5000) == "Authorization header too large (max 2048 bytes)"


@pytest.mark.parametrize(
    "header", ["Nostr !!!!", "Nostr abcde", "Nostr a=bc", "Nostr ab=c=", "Nostr " + "A" * 5]
)
def test_garbage_base64_is_refused(header: str) -> None:
    assert _refused(header) == "auth event is not valid base64"


@pytest.mark.parametrize(
    "payload", [b"not json", b"[]", b'{"kind": 27235}', b"\xff\xfe", b'{"a":1,"a":2}']
)
def test_base64_of_something_else_is_refused(payload: bytes) -> None:
    reason = _refused("Nostr " + base64.b64encode(payload).decode())
    assert reason.startswith("invalid auth event: ")


def test_wrong_kind_is_refused() -> None:
    assert _refused(_header(_post_tags(), kind=1)) == "auth event kind must be 27235"
    assert _refused(_header(_post_tags(), kind=22242)) == "auth event kind must be 27235"


def test_bad_signature_is_refused() -> None:
    event = sign_event(SECRET, kind=27235, tags=_post_tags(), content="", created_at=NOW)
    other = sign_event(SECRET, kind=27235, tags=_post_tags(), content="x", created_at=NOW)
    event["sig"] = other["sig"]
    header = "Nostr " + base64.b64encode(orjson.dumps(event)).decode()
    assert _refused(header) == "invalid auth event: bad signature"


def test_tampered_event_is_refused() -> None:
    event = sign_event(SECRET, kind=27235, tags=_post_tags(), content="", created_at=NOW)
    event["tags"] = _post_tags(url="https://relay.example/query")
    header = "Nostr " + base64.b64encode(orjson.dumps(event)).decode()
    assert _refused(header, url="https://relay.example/query") == "invalid auth event: bad event id"


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (None, "missing Authorization header"),
        ("", "missing Authorization header"),
        ("   ", "missing Authorization header"),
        ("Nostr", "missing auth event"),
        ("Nostr   ", "missing auth event"),
        ("Bearer abc", "Authorization scheme must be Nostr"),
        ("Basic dXNlcjpwdw==", "Authorization scheme must be Nostr"),
        ("Nostr\u00e9 abc", "malformed Authorization header"),
    ],
)
def test_missing_or_foreign_authorization_is_refused(header: str | None, reason: str) -> None:
    assert _refused(header) == reason


# --- URL normalisation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "normalized"),
    [
        ("HTTPS://Relay.Example:443/a/B?q=1#f", "https://relay.example/a/B?q=1#f"),
        ("http://relay.example:80", "http://relay.example/"),
        ("http://relay.example:8080/", "http://relay.example:8080/"),
        ("https://relay.example:80/", "https://relay.example:80/"),
        ("https://[2001:DB8::1]:443/x", "https://[2001:db8::1]/x"),
        ("https://relay.example/x?", "https://relay.example/x"),
    ],
)
def test_normalize_url(url: str, normalized: str) -> None:
    assert normalize_url(url) == normalized


# --- properties -------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    header=st.none()
    | st.text(max_size=120)
    | st.builds(lambda s: "Nostr " + s, st.text(max_size=120))
    | st.builds(
        lambda b: "Nostr " + base64.b64encode(b).decode(),
        st.binary(max_size=200),
    ),
    body=st.none() | st.binary(max_size=20),
)
def test_arbitrary_headers_raise_only_nip98_error(header: str | None, body: bytes | None) -> None:
    with contextlib.suppress(Nip98Error):
        _verify(header, body=body)


_tag_values = st.sampled_from(
    [URL, "https://relay.example:443/event", "post", "GET", "", "x", "https://[", "::"]
)


@settings(max_examples=200, deadline=None)
@given(
    tags=st.lists(
        st.lists(st.sampled_from(["u", "method", "payload", "x"]) | _tag_values, min_size=1),
        max_size=5,
    ),
    kind=st.sampled_from([27235, 1]),
    skew=st.integers(-120, 120),
    url=st.sampled_from([URL, "https://relay.example:99999/event"]) | st.text(max_size=30),
)
def test_arbitrary_signed_events_raise_only_nip98_error(
    tags: list[list[str]], kind: int, skew: int, url: str
) -> None:
    with contextlib.suppress(Nip98Error):
        _verify(_header(tags, kind=kind, created_at=NOW + skew), body=None, url=url)


# --- the key a header claims, unverified -------------------------------------------------------


def test_the_claimed_key_is_the_events_before_any_check() -> None:
    """`claimed_pubkey` reads the key without checking anything else: a stale, misdirected or
    forged header still names it (the caller discards work done for it unless verification
    names the same key)."""
    header = make_nip98_header(SECRET, url=URL, method="POST", body=BODY, created_at=NOW)
    assert claimed_pubkey(header) == PUBKEY == _verify(header).pubkey
    event = orjson.loads(base64.b64decode(header.split()[1]))
    forged = base64.b64encode(orjson.dumps({**event, "sig": "0" * 128})).decode()
    assert claimed_pubkey(f"Nostr {forged}") == PUBKEY  # a broken signature
    assert claimed_pubkey(_header(_post_tags(url="http://elsewhere/"), created_at=1)) == PUBKEY


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Basic dXNlcjpwYXNz",
        "Nostr",
        "Nostr !!!",
        "Nostr " + base64.b64encode(b"[1, 2]").decode(),
        "Nostr " + base64.b64encode(b'{"pubkey": 7}').decode(),
        "Nostr " + base64.b64encode(b'{"pubkey": "abc"}').decode(),
        "Nostr " + base64.b64encode(b'{"pubkey": "' + b"a" * 64 + b'"').decode(),
        "Nostr " + "A" * 4000,
    ],
)
def test_a_header_without_a_key_claims_none(header: str | None) -> None:
    assert claimed_pubkey(header) is None
