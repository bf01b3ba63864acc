"""One set of address rules for HTTP requests and WebSocket handshakes (relaycore.addressing).

The same request, seen as a Django request (HTTP) and as an ASGI scope (the WebSocket's, and the
front door's), must give the same client address, public host and scheme, for every mix of
peer, Host and forwarded headers, trusted proxies or not, RELAY_PUBLIC_URL or not.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import RequestFactory, override_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from artifacts.ws import scope as ws_scope
from relaycore import addressing, http

PEERS = st.sampled_from(["10.0.0.5", "192.0.2.9", "::1", "not-an-ip"])
HOSTS = st.sampled_from(["", "Team.Example", "team.example:8443", "[::1]:8000", "other.example"])
FORWARDED_FOR = st.sampled_from(["", "203.0.113.7", "198.51.100.1, 203.0.113.7", " , "])
FORWARDED_HOST = st.sampled_from(["", "Public.Example", "public.example:443, inner"])
FORWARDED_PROTO = st.sampled_from(["", "https", "http", "wss", "gopher"])


def _scope(peer: str, host: str, headers: dict[str, str], secure: bool) -> dict[str, Any]:
    pairs = [(name.lower().encode(), value.encode()) for name, value in headers.items() if value]
    if host:
        pairs.append((b"host", host.encode()))
    return {"type": "websocket", "client": (peer, 5555), "server": ("127.0.0.1", 8000),
            "scheme": "wss" if secure else "ws", "headers": pairs}


@settings(max_examples=300, deadline=None)
@given(
    peer=PEERS, host=HOSTS, forwarded_for=FORWARDED_FOR, forwarded_host=FORWARDED_HOST,
    forwarded_proto=FORWARDED_PROTO, secure=st.booleans(),
    proxies=st.sampled_from([(), ("10.0.0.0/8",), ("::1/128", "192.0.2.0/24")]),
    public_url=st.sampled_from([None, "https://relay.example"]),
)
def test_http_and_websocket_read_the_same_address(
    peer: str, host: str, forwarded_for: str, forwarded_host: str, forwarded_proto: str,
    secure: bool, proxies: tuple[str, ...], public_url: str | None,
) -> None:
    headers = {"X-Forwarded-For": forwarded_for, "X-Forwarded-Host": forwarded_host,
               "X-Forwarded-Proto": forwarded_proto}
    meta: dict[str, Any] = {
        f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items() if v
    }
    if host:
        meta["HTTP_HOST"] = host
    with override_settings(RELAY_TRUSTED_PROXIES=proxies, RELAY_PUBLIC_URL=public_url):
        request = RequestFactory().get("/query", REMOTE_ADDR=peer, secure=secure, **meta)
        if not host:
            request.META.pop("HTTP_HOST", None)
            request.META["SERVER_NAME"] = "127.0.0.1:8000"
        scope = _scope(peer, host, headers, secure)
        assert http.client_address(request) == ws_scope.client_address(scope)
        assert http.request_host(request) == ws_scope.public_host(scope)
        http_url = http.absolute_url(request)
        relay_url = ws_scope.public_relay_url(scope)
        if public_url is None:
            # The same netloc, and TLS on one exactly when on the other.
            assert http_url.split("://", 1)[1].removesuffix("/query") == (
                relay_url.split("://", 1)[1].removesuffix("/")
            )
            assert http_url.startswith("https://") == relay_url.startswith("wss://")
        else:
            assert http_url == "https://relay.example/query"
            assert relay_url == "https://relay.example/"


@override_settings(RELAY_TRUSTED_PROXIES=("10.0.0.0/8",), RELAY_PUBLIC_URL=None)
def test_forwarded_headers_count_only_from_a_trusted_proxy() -> None:
    trusted = _scope("10.1.2.3", "inner:8000", {"X-Forwarded-For": "198.51.100.1, 203.0.113.7",
                                                 "X-Forwarded-Host": "Public.Example",
                                                 "X-Forwarded-Proto": "https"}, False)
    assert ws_scope.client_address(trusted) == "203.0.113.7"
    assert ws_scope.public_host(trusted) == "public.example"
    assert ws_scope.public_relay_url(trusted) == "wss://public.example/"
    stranger = {**trusted, "client": ("192.0.2.1", 1)}
    assert ws_scope.client_address(stranger) == "192.0.2.1"
    assert ws_scope.public_host(stranger) == "inner"
    assert ws_scope.public_relay_url(stranger) == "ws://inner:8000/"


BAD_HOSTS = [
    "127.0.0.1:8000@evil.example",  # user info
    "evil.example@127.0.0.1",
    "127.0.0.1:abc",  # no number
    "127.0.0.1:99999",  # out of range
    "127.0.0.1:0",
    "127.0.0.1:",
    "team.example,other.example",  # two Host lines, as Django joins them
    "team.example/path",
    "team .example",
    "[::1",
]


@pytest.mark.parametrize("host", BAD_HOSTS)
def test_a_host_that_is_no_host_is_refused_and_names_no_community(host: str) -> None:
    with pytest.raises(addressing.HostError):
        addressing.parse_host(host)
    scope = _scope("192.0.2.9", host, {}, False)
    assert addressing.host_error(addressing.RequestAddress.of_scope(scope))
    # Nothing downstream reads a community or a URL out of it.
    assert ws_scope.public_host(scope) == ""
    request = RequestFactory().get("/", HTTP_HOST=host, REMOTE_ADDR="192.0.2.9")
    assert http.request_host(request) == ""


@pytest.mark.parametrize(("host", "parsed", "public"), [
    ("Team.Example", ("team.example", None), "team.example"),
    ("team.example:8443", ("team.example", 8443), "team.example"),
    ("[::1]:8000", ("[::1]", 8000), "::1"),
    ("127.0.0.1:65535", ("127.0.0.1", 65535), "127.0.0.1"),
])
def test_hosts_parse_to_host_and_port(
    host: str, parsed: tuple[str, int | None], public: str
) -> None:
    assert addressing.parse_host(host) == parsed
    scope = _scope("192.0.2.9", host, {}, False)
    assert addressing.host_error(addressing.RequestAddress.of_scope(scope)) is None
    assert ws_scope.public_host(scope) == public


def test_two_host_lines_are_refused_even_when_both_are_hosts() -> None:
    scope = _scope("192.0.2.9", "team.example", {}, False)
    scope["headers"].append((b"host", b"other.example"))
    address = addressing.RequestAddress.of_scope(scope)
    assert addressing.host_error(address) == "the request has more than one Host header"
    assert addressing.public_host(address) == ""


@override_settings(RELAY_TRUSTED_PROXIES=("10.0.0.0/8",))
def test_a_trusted_proxys_forwarded_host_goes_through_the_same_parser() -> None:
    scope = _scope("10.0.0.5", "inner", {"X-Forwarded-Host": "public.example:abc"}, False)
    assert addressing.host_error(addressing.RequestAddress.of_scope(scope))
    assert ws_scope.public_host(scope) == ""
