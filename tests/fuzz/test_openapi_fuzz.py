"""Schemathesis against a live relay with the OpenAPI document generated from the views
(drf-spectacular; relaycore/edge/openapi.py), the one GET /openapi.json serves.

Every generated request carries a *valid* NIP-98 header signed over the exact bytes sent (the
`payload` tag is the sha256 of the serialized body), so the fuzzer gets past authentication into
the filter, token and event parsers. Checks: no 5xx, status codes, content types, response
headers (CORS on every answer) and bodies as the document says.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import Failure
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from artifacts.models import Channel, ChannelMember, Community
from buzzrelay.openapi_document import openapi_document
from nostr.events import sign_event
from nostr.nip98 import make_nip98_header
from nostr.schnorr import generate_secret, pubkey_from_secret


def ok_triple(ctx: Any, response: schemathesis.Response, case: schemathesis.Case) -> None:
    """POST /event answers 200 with `["OK", <id>, <bool>, <str>]` exactly (positions included)."""
    if case.operation.path == "/event" and response.status_code == 200:
        answer = response.json()
        if not (
            answer[0] == "OK" and isinstance(answer[1], str) and isinstance(answer[2], bool)
            and isinstance(answer[3], str)
        ):
            raise Failure(operation=case.operation.label, title="OK triple", message=str(answer))


# Not `negative_data_rejection`: it does not count 413 (a body over 64 KiB) as a rejection.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    ok_triple,
]
# Several readers so the per-pubkey rate limit is hit rarely (429 is documented, but a fuzzer
# stuck on 429 tests nothing behind it).
SECRETS = [generate_secret() for _ in range(4)]
_rotation = itertools.cycle(SECRETS)


@pytest.fixture
def fuzz_community(live_server: Any, transactional_db: None) -> Community:
    community = Community.objects.create(host="localhost", name="Fuzz")
    open_channel = Channel.objects.create(community=community, channel_id=uuid.uuid4(), name="o")
    private = Channel.objects.create(
        community=community, channel_id=uuid.uuid4(), name="p", visibility="private"
    )
    for secret in SECRETS[:2]:
        ChannelMember.objects.create(
            community=community, channel_id=private.channel_id, pubkey=pubkey_from_secret(secret)
        )
    del open_channel
    return community


# Loaded at import (pytest 9 broke schemathesis' lazy fixture loader); the server URL is given
# per request instead.
schema = schemathesis.openapi.from_dict(openapi_document())


# The kinds the relay accepts: a generated event is re-signed as one of them about half the time,
# so arbitrary tags and content reach the write policies instead of stopping at the signature.
SERVED_KINDS = (45010, 9000, 9001, 9002, 9005, 9007, 9008)


def _signable(body: Any) -> bool:
    return (
        isinstance(body, dict)
        and isinstance(body.get("kind"), int)
        and isinstance(body.get("content"), str)
        and isinstance(body.get("tags"), list)
        and all(isinstance(t, list) and all(isinstance(v, str) for v in t) for t in body["tags"])
    )


def _send(case: schemathesis.Case, base_url: str) -> requests.Response:
    """Send `case` with a NIP-98 header signed over the exact URL, method and body bytes."""
    secret = next(_rotation)
    generated: Any = case.body
    if case.operation.path == "/event" and _signable(generated) and generated["kind"] % 2:
        case.body = sign_event(
            secret, kind=SERVED_KINDS[generated["kind"] % len(SERVED_KINDS)],
            tags=generated["tags"], content=generated["content"],
        )
    kwargs = case.as_transport_kwargs(base_url=base_url)
    kwargs.pop("auth", None)
    prepared = requests.Request(
        **{k: v for k, v in kwargs.items() if k in ("method", "url", "headers", "params",
                                                    "cookies", "data", "json", "files")}
    ).prepare()
    body = prepared.body.encode() if isinstance(prepared.body, str) else prepared.body
    assert body is None or isinstance(body, bytes)
    if case.operation.method.upper() == "POST":
        assert prepared.method is not None and prepared.url is not None
        prepared.headers["Authorization"] = make_nip98_header(
            secret, url=prepared.url, method=prepared.method, body=body or None
        )
    with requests.Session() as session:
        return session.send(prepared, timeout=30, allow_redirects=False)


@schema.parametrize()
@settings(
    max_examples=40,
    deadline=None,
    # The community and live server are meant to be shared by every generated request.
    suppress_health_check=[
        HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture
    ],
)
def test_api_conforms_to_its_openapi_document(
    case: schemathesis.Case, live_server: Any, fuzz_community: Community
) -> None:
    response = _send(case, live_server.url)
    case.validate_response(response, checks=CHECKS)


def test_document_is_served_and_names_the_host(live_server: Any, transactional_db: None) -> None:
    Community.objects.create(host="localhost", name="Doc")
    response = requests.get(f"{live_server.url}/openapi.json", timeout=10)
    assert response.status_code == 200
    document = response.json()
    assert document["servers"] == [{"url": live_server.url}]
    assert set(document["paths"]) >= {"/event", "/query", "/", "/info", "/healthz", "/readyz"}
    assert response.headers["Access-Control-Allow-Origin"] == "*"


def _iter_refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _iter_refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _iter_refs(item)


def test_every_reference_resolves() -> None:
    document = openapi_document()
    for ref in _iter_refs(document):
        node: Any = document
        for part in ref.removeprefix("#/").split("/"):
            node = node[part]
        assert isinstance(node, dict), ref
