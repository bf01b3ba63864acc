"""The OpenAPI document generated from the views (relaycore/edge/openapi.py) and its staff page.

The live contract is checked by schemathesis (tests/fuzz/test_openapi_fuzz.py); here: the
document is valid OpenAPI 3.1, is built from the URL configuration's views without a warning,
says what the relay's pipeline answers, and the Swagger UI page is for staff only and loads
nothing from another host.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import resolve
from openapi_spec_validator import validate
from openapi_spec_validator.validation import OpenAPIV31SpecValidator

from artifacts.selectors.filters import MAX_OFFSET, MAX_TAG_NAMES, MAX_TAG_VALUES
from buzzrelay.openapi_document import openapi_document

DOCS = "/admin/api/"
CORS = {
    "Access-Control-Allow-Origin", "Access-Control-Allow-Headers",
    "Access-Control-Allow-Methods", "Access-Control-Expose-Headers",
}
# Every operation of the API, and only those: no admin, static or staff pages.
OPERATIONS = {
    ("/event", "post"), ("/event", "options"), ("/query", "post"), ("/query", "options"),
    ("/", "get"), ("/info", "get"), ("/metrics", "get"), ("/healthz", "get"),
    ("/readyz", "get"), ("/openapi.json", "get"),
}


def _operations(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (path, method): operation
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }


def test_document_is_valid_openapi_3_1() -> None:
    document = openapi_document()
    assert document["openapi"].startswith("3.1")
    validate(document, cls=OpenAPIV31SpecValidator)


def test_generated_through_the_settings_without_a_warning(tmp_path: Path) -> None:
    """`manage.py spectacular` (the settings' generator) builds the same document, warns of
    nothing (an unresolvable view, authenticator or body would) and validates it."""
    out = tmp_path / "openapi.json"
    call_command(
        "spectacular", "--fail-on-warn", "--validate", "--format", "openapi-json",
        "--file", str(out),
    )
    assert json.loads(out.read_text()) == openapi_document()


def test_operations_are_the_url_configurations_views() -> None:
    operations = _operations(openapi_document())
    assert set(operations) == OPERATIONS
    for path, _ in operations:
        assert resolve(path).url_name, path
    ids = [operation["operationId"] for operation in operations.values()]
    assert len(ids) == len(set(ids))
    assert operations["/query", "post"]["operationId"] == "postQuery"  # the URL name


def test_pipeline_answers_headers_and_security() -> None:
    document = openapi_document()
    operations = _operations(document)
    for key, operation in operations.items():
        for status, response in operation["responses"].items():
            assert set(response["headers"]) >= CORS, (key, status)
            if status.startswith(("4", "5")):
                assert set(response["content"]) == {"application/json"}, (key, status)
    for path in ("/event", "/query"):
        post = operations[path, "post"]
        assert post["security"] == [{"nip98": []}]
        assert post["requestBody"]["required"] is True
        assert set(post["responses"]) == {"200", "400", "401", "404", "413", "429", "503"}
        assert "WWW-Authenticate" in post["responses"]["401"]["headers"]
        assert document["components"]["headers"]["RetryAfter"]["required"] is True
        assert post["responses"]["429"]["headers"]["Retry-After"] == {
            "$ref": "#/components/headers/RetryAfter"
        }
        assert "Retry-After" in post["responses"]["503"]["headers"]
        codes = post["responses"]["404"]["content"]["application/json"]["schema"]
        assert codes["properties"]["error"]["enum"] == ["unknown_community"]
        assert set(operations[path, "options"]["responses"]) == {"204"}
        assert "security" not in operations[path, "options"]
    for path in ("/", "/info", "/healthz", "/readyz", "/metrics", "/openapi.json"):
        assert "security" not in operations[path, "get"], path
    assert document["components"]["securitySchemes"]["nip98"]["name"] == "Authorization"
    # NIP-11: the page for people only on `/` (its renderers), the document on both.
    root = operations["/", "get"]["responses"]["200"]["content"]
    info = operations["/info", "get"]["responses"]["200"]["content"]
    assert set(root) == {"application/nostr+json", "text/html"}
    assert set(info) == {"application/nostr+json"}
    accept = operations["/", "get"]["parameters"][0]
    assert (accept["name"], accept["in"]) == ("Accept", "header")


@pytest.mark.django_db
def test_served_naming_the_host_asked() -> None:
    response = Client().get("/openapi.json", HTTP_HOST="relay.example.org")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Access-Control-Allow-Origin"] == "*"
    document = response.json()
    assert document["servers"] == [{"url": "http://relay.example.org"}]
    assert document == openapi_document(server_url="http://relay.example.org")
    refused = Client().post("/openapi.json", b"{}", content_type="application/json")
    assert refused.status_code == 405
    assert refused.json()["error"] == "method_not_allowed"


class _Resources(HTMLParser):
    """The URLs a page loads: script src, link href, img src."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        wanted = {"script": "src", "link": "href", "img": "src"}.get(tag)
        for name, value in attrs:
            if name == wanted and value:
                self.urls.append(value)


@pytest.mark.django_db
def test_staff_docs_page_uses_local_static_files_only() -> None:
    staff = User.objects.create_user("operator", password="correct horse", is_staff=True)
    client = Client()
    client.force_login(staff)
    response = client.get(DOCS)
    assert response.status_code == 200
    page = response.content.decode()
    assert 'id="swagger-ui"' in page and '"/openapi.json"' in page
    resources = _Resources()
    resources.feed(page)
    assert len(resources.urls) >= 3  # the stylesheet and both scripts at least
    for url in resources.urls:
        assert url.startswith("/static/drf_spectacular_sidecar/"), url
        # A hashed name from the manifest, collected into STATIC_ROOT (buzzrelay.static_files).
        assert (Path(settings.STATIC_ROOT) / url.removeprefix("/static/")).is_file(), url
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)


@pytest.mark.django_db
def test_docs_page_sends_others_to_the_login_page() -> None:
    anonymous = Client().get(DOCS)
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith(f"/admin/login/?next={DOCS}")
    member = User.objects.create_user("member", password="correct horse", is_staff=False)
    client = Client()
    client.force_login(member)
    response = client.get(DOCS)
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_the_documents_limits_are_the_enforced_ones() -> None:
    schemas = openapi_document()["components"]["schemas"]
    limits = settings.RELAY_EVENT_LIMITS
    plain = schemas["PlainFilter"]
    assert plain["properties"]["offset"]["maximum"] == MAX_OFFSET
    assert plain["properties"]["limit"]["maximum"] == settings.RELAY_MAX_LIMIT
    assert plain["maxProperties"] == MAX_TAG_NAMES + 4
    assert str(MAX_OFFSET + settings.RELAY_MAX_LIMIT) in plain["description"]
    assert plain["patternProperties"]["^#[A-Za-z0-9_.-]{1,64}$"]["maxItems"] == MAX_TAG_VALUES
    event = schemas["Event"]["properties"]["tags"]
    assert event["maxItems"] == limits.max_tags
    assert event["items"]["items"]["maxLength"] == limits.max_tag_value_bytes
    page = schemas["IncrementalPage"]["properties"]
    assert page["events"]["maxItems"] == page["removed"]["maxItems"] == settings.RELAY_MAX_LIMIT
