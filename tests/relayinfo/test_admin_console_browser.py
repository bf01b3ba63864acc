"""The staff console's sign-in in Chromium under `buzz-admin serve`, as an operator exposes it:
two instances (the first with two worker processes) sharing one PostgreSQL, ADMIN_REQUIRE_2FA on,
an allow-list, and a trusted proxy rule. One test, because every relay start costs seconds.

The failed sign-ins made on the first instance lock the account on the second (django-axes'
rows in PostgreSQL, not process memory), until `buzz-admin staff unlock`; then the staff member
enrols a TOTP authenticator from the page, gets recovery codes, and signs in on the other
instance with password and code. A client outside ADMIN_ALLOWED_NETWORKS gets a 404. Last, a
browser whose NIP-07 signer (a test signer: `window.nostr` backed by the suite's own signing)
holds the staff member's linked key signs in with it, and gives a recovery code as the second
factor."""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import orjson
from django.contrib.auth.models import User
from django.db import connections

from nostr.events import sign
from relayinfo.models import StaffNostrKey
from tests.factories import Key, make_key
from tests.relay_server import ROOT, RelayProcess, start_relay
from tests.relayinfo.conftest import transactional
from tests.relayinfo.test_admin import chromium
from tests.relayinfo.test_admin_console import next_totp_code, totp_code

pytestmark = transactional

PASSWORD = "correct horse"
ENV = {
    "ADMIN_REQUIRE_2FA": "true",
    "ADMIN_ALLOWED_NETWORKS": "127.0.0.0/8",
    # Chromium connects from loopback; a forwarded address is believed from there only.
    "RELAY_TRUSTED_PROXIES": "127.0.0.1",
}


def _sign_in(page: Any, base: str, password: str, token: str = "") -> Any:
    """Submit the login form; the answer to the POST (after any redirects)."""
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", password)
    if token:
        page.fill("#id_otp_token", token)
    with page.expect_navigation() as navigation:
        page.click("input[type=submit]")
    return navigation.value


def _next_code(secret: str, user: User) -> str:
    """`next_totp_code`, read on a thread of its own: Playwright's sync API runs an event loop
    on this one, where Django refuses the ORM."""

    def read() -> str:
        try:
            return next_totp_code(secret, user)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(read).result()


def _refusals(relay: RelayProcess) -> float:
    text = httpx.get(f"{relay.url}/metrics", timeout=10).text
    found = re.search(r"^buzz_admin_login_refusals_total (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def test_lockout_across_workers_and_instances_unlock_totp_and_allow_list_in_chromium() -> None:
    user = User.objects.create_user("operator", password=PASSWORD, is_staff=True)
    key = make_key()
    StaffNostrKey.objects.create(user=user, pubkey=key.pubkey)
    first = start_relay(ENV, workers=2)
    second = None
    try:
        second = start_relay(ENV)
        with chromium() as browser:
            codes = _drive(browser, user, first, second)
            _nostr_sign_in(browser, first, key, codes[0])
    finally:
        for relay in (first, second):
            if relay is not None:
                relay.stop()
    assert "staff sign-in refused: locked out (account 'operator', client 127.0.0.1)" in (
        second.log())


def _drive(browser: Any, user: User, first: RelayProcess, second: RelayProcess) -> list[str]:
    page = browser.new_page()
    # Ten wrong passwords on the first instance (either of its workers answers each).
    statuses = [_sign_in(page, first.url, f"guess {n}").status for n in range(10)]
    assert statuses == [200] * 9 + [429], statuses
    assert page.locator("#locked-out").is_visible()
    # The eleventh, right, on the other instance: refused, logged, counted.
    assert _sign_in(page, second.url, PASSWORD).status == 429
    assert _refusals(second) >= 1
    unlocked = subprocess.run(
        [sys.executable, "-m", "buzzrelay.cli", "staff", "unlock", "operator"],
        cwd=ROOT, env=first.env, capture_output=True, text=True, timeout=60,
    )
    assert unlocked.returncode == 0 and "unlocked operator" in unlocked.stdout, unlocked.stderr

    # Unlocked: the password leads to the enrolment (ADMIN_REQUIRE_2FA), the code confirms it.
    _sign_in(page, second.url, PASSWORD)
    page.goto(f"{second.url}/admin/")
    page.wait_for_url("**/admin/two-factor/")
    assert page.locator("#qr svg").is_visible()
    secret = page.inner_text("#totp-secret")
    assert page.inner_text("#otpauth-uri").startswith("otpauth://totp/")
    page.fill("#id_otp_token", totp_code(secret))
    page.click("#enrol-form input[type=submit]")
    page.wait_for_selector("#recovery-codes")
    codes = page.locator("#recovery-codes li").all_inner_texts()
    assert len(codes) == 10
    page.goto(f"{second.url}/admin/")
    assert page.locator("#readiness-verdict").is_visible()
    page.close()

    # A fresh browser on the first instance: password and the authenticator's (next) code.
    context = browser.new_context()
    fresh = context.new_page()
    answer = _sign_in(fresh, first.url, PASSWORD, _next_code(secret, user))
    assert answer.status == 200 and fresh.url == f"{first.url}/admin/"
    assert fresh.locator("#readiness-verdict").is_visible()
    context.close()

    # Outside the allow-list (the client address the trusted proxy forwards): no console.
    outside = browser.new_context(extra_http_headers={"X-Forwarded-For": "192.0.2.10"})
    answer = outside.new_page().goto(f"{first.url}/admin/login/")
    assert answer.status == 404 and answer.json()["error"] == "not_found"
    outside.close()
    return codes


# A NIP-07 signer for the page: window.nostr's two calls, answered by the test's Python.
SIGNER = """
window.nostr = {
  getPublicKey: async () => await window.testSignerPubkey(),
  signEvent: async (event) => JSON.parse(await window.testSignerSign(JSON.stringify(event))),
};
"""


def _nostr_sign_in(browser: Any, relay: RelayProcess, key: Key, recovery_code: str) -> None:
    context = browser.new_context()
    signed: list[dict[str, Any]] = []

    def sign_for_page(template: str) -> str:
        event = orjson.loads(template)
        signed.append(event)
        return sign(key.secret, kind=event["kind"], tags=event["tags"],
                    content=event["content"], created_at=event["created_at"]).raw

    context.expose_function("testSignerPubkey", lambda: key.pubkey)
    context.expose_function("testSignerSign", sign_for_page)
    context.add_init_script(SIGNER)
    page = context.new_page()
    page.goto(f"{relay.url}/admin/login/")
    page.click("#nostr-login-link")
    page.click("#nostr-sign-in")
    # Signed in by the key; ADMIN_REQUIRE_2FA still asks for the second factor.
    page.wait_for_selector("#verify-form")
    assert signed[0]["kind"] == 27235 and ["method", "POST"] in signed[0]["tags"]
    page.fill("#id_otp_token", recovery_code)
    page.click("#verify-form input[type=submit]")
    page.wait_for_url(f"{relay.url}/admin/")
    assert page.locator("#readiness-verdict").is_visible()
    context.close()
