"""NIP-11 on `/` and `/info`: the document of PROTOCOL.md section 6, per community host."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client, override_settings

from artifacts.models import Community
from relaycore.edge.renderers import parse_accept
from tests.relayinfo.conftest import HOST, NOSTR_JSON, nip11, transactional

pytestmark = transactional


def test_ready_deployment_advertises_incremental_with_the_exact_document(
    community: Community,
) -> None:
    response = nip11()
    assert response.status_code == 200
    assert response["Content-Type"] == NOSTR_JSON
    assert response.json() == {
        "name": "Team",
        "description": settings.RELAY_DESCRIPTION,
        "pubkey": settings.RELAY_PUBKEY,
        "self": settings.RELAY_PUBKEY,
        "software": settings.RELAY_SOFTWARE_URL,
        "version": settings.RELAY_VERSION,
        "supported_nips": [1, 11, 42, 98],
        "supported_extensions": ["artifacts.incremental", "artifacts.sync"],
        "artifacts": {
            "incremental": {"endpoint": "/query", "overlap_seconds": 120, "max_limit": 1000,
                            "view_changes": ["reset", "incremental"]},
            "sync": {"endpoint": "/", "kinds": [45010, 45011]},
        },
        "limitation": {
            "max_message_length": 131072,
            "max_subscriptions": 64,
            "max_limit": 1000,
            "max_subid_length": 64,
            "max_event_tags": 256,
            "auth_required": True,
            "restricted_writes": True,
            "created_at_lower_limit": 31536000,
            "created_at_upper_limit": 900,
        },
    }


def test_info_path_answers_the_document_without_accept(community: Community) -> None:
    response = nip11(accept=None, path="/info")
    assert response.status_code == 200
    assert response["Content-Type"] == NOSTR_JSON
    assert "artifacts.incremental" in response.json()["supported_extensions"]


def test_each_community_host_gets_its_own_document() -> None:
    Community.objects.create(host="one.example", name="One", artifacts_enabled=True)
    Community.objects.create(host="two.example", name="Two", artifacts_enabled=False)
    one = nip11("ONE.example:8443").json()
    two = nip11("two.example").json()
    assert one["name"] == "One"
    assert "artifacts.incremental" in one["supported_extensions"]
    # Artifacts disabled: never incremental, even on a ready deployment.
    assert two["name"] == "Two"
    assert two["supported_extensions"] == ["artifacts.sync"]
    assert set(two["artifacts"]) == {"sync"}


@override_settings(RELAY_WEBSOCKET_SYNC=False)
def test_sync_is_listed_only_while_the_websocket_sync_is_served(community: Community) -> None:
    document = nip11().json()
    assert document["supported_extensions"] == ["artifacts.incremental"]
    assert set(document["artifacts"]) == {"incremental"}


@override_settings(ARTIFACT_SYNC_OVERLAP_SECONDS=300)
def test_overlap_is_the_configured_one(community: Community) -> None:
    assert nip11().json()["artifacts"]["incremental"]["overlap_seconds"] == 300


@pytest.mark.parametrize(
    "accept",
    [
        "application/nostr+json",
        "application/nostr+json; q=0.9, text/html",
        "text/html;q=0.5, application/nostr+json;q=0.1",
        "Application/Nostr+JSON",
        'application/nostr+json;charset="utf-8";q=1',
        "application/json, application/nostr+json",
    ],
)
def test_accept_naming_the_media_type_gets_the_document(
    community: Community, accept: str
) -> None:
    response = nip11(accept=accept)
    assert response.status_code == 200
    assert response["Content-Type"] == NOSTR_JSON
    assert response.json()["name"] == "Team"
    assert "Accept" in response["Vary"]


@pytest.mark.parametrize(
    "accept",
    [
        None,
        "*/*",
        "application/*",
        "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
        "application/nostr+json;q=0",
        "application/nostr+json; q=0.0, text/html",
        "application/nostr+json;q=abc",
        "application/json",
    ],
)
def test_other_accept_gets_the_human_page(community: Community, accept: str | None) -> None:
    response = nip11(accept=accept)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert "Buzz relay" in page and "Team" in page
    assert f"ws://{HOST}/" in page
    assert "Incremental artifact reads are available" in page


def test_accept_parsing(community: Community) -> None:
    ranges = parse_accept(
        "text/html;level=1;q=0.7, APPLICATION/NOSTR+JSON ; q = 0.3 , bad, x/y;q=2"
    )
    assert [(r.type, r.q) for r in ranges] == [("text/html", 0.7), ("application/nostr+json", 0.3)]
    for accept, document in (("application/nostr+json;q=0.001", True),
                             ("application/nostr+json;q=0.000", False), ("", False)):
        assert (nip11(HOST, accept=accept)["Content-Type"] == NOSTR_JSON) is document, accept


def test_cors_on_the_document_and_preflight(community: Community) -> None:
    response = nip11(HOST, accept=NOSTR_JSON)
    assert response["Access-Control-Allow-Origin"] == "*"
    for path in ("/", "/info"):
        preflight = Client().options(
            path, HTTP_HOST=HOST, HTTP_ORIGIN="https://app.example",
            HTTP_ACCESS_CONTROL_REQUEST_METHOD="GET",
            HTTP_ACCESS_CONTROL_REQUEST_HEADERS="accept",
        )
        assert preflight.status_code == 204
        assert preflight["Access-Control-Allow-Origin"] == "*"
        assert "GET" in preflight["Access-Control-Allow-Methods"]
        assert "Accept" in preflight["Access-Control-Allow-Headers"]


@pytest.mark.parametrize("accept", [NOSTR_JSON, "text/html", None])
@pytest.mark.parametrize("path", ["/", "/info"])
def test_unknown_host_is_a_json_404(community: Community, accept: str | None, path: str) -> None:
    response = nip11("elsewhere.example", accept=accept, path=path)
    assert response.status_code == 404
    assert response.json()["error"] == "unknown_community"
    assert response["Access-Control-Allow-Origin"] == "*"


def test_other_methods_are_refused_as_json(community: Community) -> None:
    response = Client().post("/", data=b"{}", content_type="application/json", HTTP_HOST=HOST)
    assert response.status_code == 405
    assert response.json()["error"] == "method_not_allowed"


def test_limitation_values_are_the_enforcing_settings(community: Community) -> None:
    limitation = nip11().json()["limitation"]
    events = settings.RELAY_EVENT_LIMITS
    assert limitation["max_event_tags"] == events.max_tags
    assert limitation["created_at_lower_limit"] == events.created_at_lower
    assert limitation["created_at_upper_limit"] == events.created_at_upper
    assert limitation["max_message_length"] == settings.RELAY_MAX_MESSAGE_LENGTH
    assert limitation["max_subscriptions"] == settings.RELAY_MAX_SUBSCRIPTIONS
    assert limitation["max_subid_length"] == settings.RELAY_MAX_SUBID_LENGTH
    assert limitation["max_limit"] == settings.RELAY_MAX_LIMIT
