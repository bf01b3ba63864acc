"""The staff pages' static files under `buzz-admin serve` (a real subprocess): WhiteNoise's hashed,
compressed files with long cache headers, from the application `buzzrelay.asgi` builds."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User

from buzzrelay.static_files import STAMP_NAME, collect_static, is_collected
from tests.relay_server import RelayProcess

pytestmark = pytest.mark.django_db(transaction=True)

FOREVER = "max-age=315360000, public, immutable"


def _login(relay: RelayProcess) -> httpx.Client:
    User.objects.create_user("staffer", password="correct horse", is_staff=True)
    client = httpx.Client(base_url=relay.url)
    page = client.get("/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, page.text
    answer = client.post(
        "/admin/login/?next=/admin/",
        data={"username": "staffer", "password": "correct horse",
              "csrfmiddlewaretoken": token.group(1), "next": "/admin/"},
        headers={"Referer": f"{relay.url}/admin/login/"},
    )
    assert answer.status_code == 302, answer.text
    return client


def _assets(html: str) -> list[str]:
    return sorted(set(re.findall(r'(?:href|src)="(/static/[^"]+)"', html)))


def test_admin_css_answers_and_the_hashed_names_the_pages_use_are_cached_for_good(
    relay_server: RelayProcess,
) -> None:
    plain = httpx.get(f"{relay_server.url}/static/admin/css/base.css")
    assert plain.status_code == 200
    assert plain.headers["content-type"].startswith("text/css")
    assert "#header" in plain.text
    # An unhashed name may change with the next release: a short cache only.
    assert plain.headers["cache-control"] == "max-age=60, public"

    login_page = httpx.get(f"{relay_server.url}/admin/login/").text
    stylesheets = [url for url in _assets(login_page) if url.endswith(".css")]
    hashed = [url for url in stylesheets if re.search(r"/base\.[0-9a-f]{12}\.css$", url)]
    assert hashed, stylesheets
    answer = httpx.get(f"{relay_server.url}{hashed[0]}", headers={"Accept-Encoding": "gzip"})
    assert answer.status_code == 200
    assert answer.headers["cache-control"] == FOREVER
    assert answer.headers["content-encoding"] == "gzip"  # the precompressed copy
    assert answer.headers["vary"] == "Accept-Encoding"
    identity = httpx.get(f"{relay_server.url}{hashed[0]}", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in identity.headers
    assert answer.content == identity.content  # httpx decoded the gzip copy: the same file
    # The hashed copy names the files it uses by their hashed names too.
    assert re.search(r'url\("\.\./img/icon-[a-z]+\.[0-9a-f]{12}\.svg"\)', identity.text)

    again = httpx.get(f"{relay_server.url}{hashed[0]}",
                      headers={"If-None-Match": answer.headers["etag"]})
    assert again.status_code == 304
    part = httpx.get(f"{relay_server.url}{hashed[0]}",
                     headers={"Range": "bytes=0-9", "Accept-Encoding": "identity"})
    assert part.status_code == 206 and part.content == identity.content[:10]
    head = httpx.head(f"{relay_server.url}{hashed[0]}", headers={"Accept-Encoding": "identity"})
    assert head.status_code == 200 and head.content == b""
    assert int(head.headers["content-length"]) == len(identity.content)


def test_every_asset_of_the_staff_pages_answers_with_long_cache_headers(
    relay_server: RelayProcess,
) -> None:
    client = _login(relay_server)
    for page in ("/admin/", "/admin/relayinfo/readiness/", "/admin/api/"):
        html = client.get(page)
        assert html.status_code == 200, (page, html.text)
        assets = _assets(html.text)
        assert assets, page
        for url in assets:
            answer = client.get(url)
            assert answer.status_code == 200, url
            assert answer.headers["cache-control"] == FOREVER, url
    docs = _assets(client.get("/admin/api/").text)
    assert any("swagger-ui-dist/swagger-ui-bundle." in url for url in docs), docs


def test_a_missing_static_file_is_the_relays_json_404(relay_server: RelayProcess) -> None:
    answer = httpx.get(f"{relay_server.url}/static/admin/css/missing.css")
    assert answer.status_code == 404
    assert answer.json()["error"] == "not_found"
    refused = httpx.post(f"{relay_server.url}/static/admin/css/base.css")
    assert refused.status_code == 405


def test_collection_runs_again_only_when_a_source_file_changed(tmp_path: Path) -> None:
    assert is_collected()
    assert collect_static() is False
    stamp = Path(settings.STATIC_ROOT) / STAMP_NAME
    kept = stamp.read_text()
    try:
        stamp.write_text("another release\n")
        assert not is_collected()
        assert collect_static() is True
        assert stamp.read_text() == kept
    finally:
        stamp.write_text(kept)
