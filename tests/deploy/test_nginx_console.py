"""The staff console behind the tested proxy (deploy/nginx/buzz.conf in front of `buzz-admin
serve`, tests/deploy/nginx.py), with the production settings of docs/operations.md: the cookies
carry Secure, HttpOnly and SameSite; HSTS when turned on; a sign-in passes Django's CSRF check on
https (Referer and the trusted origin); the allow-list sees the client's address through
X-Forwarded-For; plain http is redirected by the proxy."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.contrib.auth.models import User

from tests.deploy.nginx import (
    PUBLIC_HOST,
    NginxProcess,
    PublicEndpoint,
    in_front_of,
)
from tests.relay_server import start_relay

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PASSWORD = "correct horse"


@pytest.fixture
def console(tmp_path: Path) -> Iterator[tuple[PublicEndpoint, NginxProcess]]:
    relay = start_relay({
        "RELAY_PUBLIC_URL": f"https://{PUBLIC_HOST}",
        "RELAY_TRUSTED_PROXIES": "127.0.0.1",
        "RELAY_HSTS_SECONDS": "3600",
        "ADMIN_ALLOWED_NETWORKS": "127.0.0.1/32",
    })
    with in_front_of(relay, tmp_path) as (proxy, tls):
        yield PublicEndpoint(tls, proxy.https_port), proxy


def _cookie(response: httpx.Response, name: str) -> tuple[str, set[str]]:
    """(value, attributes in lower case) of the Set-Cookie named `name`."""
    for header in response.headers.get_list("set-cookie"):
        first, *attributes = [part.strip() for part in header.split(";")]
        key, _, value = first.partition("=")
        if key == name:
            return value, {a.lower() for a in attributes}
    raise AssertionError(f"no {name} cookie in {response.headers.get_list('set-cookie')}")


def test_console_cookies_hsts_csrf_and_allow_list_behind_nginx(
    console: tuple[PublicEndpoint, NginxProcess],
) -> None:
    User.objects.create_user("operator", password=PASSWORD, is_staff=True)
    public, proxy = console
    login_url = f"https://{public.netloc}/admin/login/"
    with public.http("127.0.0.1") as http:
        form = http.get("/admin/login/")
        assert form.status_code == 200, proxy.log()
        assert form.headers["Strict-Transport-Security"] == "max-age=3600"
        csrf, attributes = _cookie(form, "csrftoken")
        assert {"secure", "httponly", "samesite=lax"} <= attributes
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
        assert token
        signed_in = http.post(
            "/admin/login/?next=/admin/",
            data={"username": "operator", "password": PASSWORD, "next": "/admin/",
                  "csrfmiddlewaretoken": token.group(1)},
            headers={"Cookie": f"csrftoken={csrf}", "Referer": login_url},
        )
        assert signed_in.status_code == 302, signed_in.text
        session, attributes = _cookie(signed_in, "sessionid")
        # The idle expiry (ADMIN_SESSION_IDLE_MINUTES, 30), pushed ahead by every request.
        assert {"secure", "httponly", "samesite=lax", "max-age=1800"} <= attributes
        index = http.get("/admin/", headers={"Cookie": f"sessionid={session}"})
        assert index.status_code == 200 and "readiness-verdict" in index.text
        assert "max-age=1800" in _cookie(index, "sessionid")[1]
    # Another client address (as nginx saw it, forwarded to the trusted relay): no console.
    with public.http("127.0.0.5") as http:
        outside = http.get("/admin/login/")
        assert outside.status_code == 404 and outside.json()["error"] == "not_found"
    plain = httpx.get(f"http://127.0.0.1:{proxy.http_port}/admin/login/",
                      headers={"Host": PUBLIC_HOST}, timeout=10)
    assert plain.status_code == 301 and plain.headers["Location"].startswith("https://")
