"""The staff console's exposure through Django's test client (relayinfo.admin_site, .staff,
.admin_login, buzzrelay.console): sign-in limits per account and per client address, the second
factor with enrolment and recovery codes, the network allow-list, the public scheme, and
`check --deploy` under the README's production settings. Chromium under `buzz-admin serve` is
tests/relayinfo/test_admin_console_browser.py; cookies behind nginx tests/deploy."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client, override_settings
from django_otp.oath import TOTP
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.models import TOTPDevice

from artifacts.models import Community
from nostr.nip98 import make_nip98_header
from relayinfo.models import StaffNostrKey
from tests.factories import make_key
from tests.relay_server import ROOT

pytestmark = pytest.mark.django_db

LOGIN = "/admin/login/"
ENROL = "/admin/two-factor/"
PASSWORD = "correct horse"


@pytest.fixture(autouse=True)
def _fast_password_hashes(settings: Any) -> None:
    """Dozens of sign-ins per test: Django's PBKDF2 (over a million rounds, about a second on a
    busy CI core) would be most of this file's time, and none of what it tests."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def staff() -> User:
    return User.objects.create_user("operator", password=PASSWORD, is_staff=True)


def sign_in(client: Client, username: str, password: str, token: str = "",
            **headers: Any) -> Any:
    return client.post(LOGIN, {"username": username, "password": password, "otp_token": token,
                               "next": "/admin/"}, **headers)


def refusals() -> float:
    """buzz_admin_login_refusals_total as /metrics reports it (loopback may read it)."""
    text = Client().get("/metrics").content.decode()
    found = re.search(r"^buzz_admin_login_refusals_total (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def totp_code(secret_b32: str) -> str:
    """The code an authenticator shows now."""
    return f"{TOTP(base64.b32decode(secret_b32)).token():06d}"


def next_totp_code(secret_b32: str, user: User) -> str:
    """The authenticator's next code: the one for the step after the step `user`'s device last
    accepted, so a second sign-in need not wait out the 30 s step. Not "the clock's next step":
    django-otp takes each step's code once and re-syncs the device's drift to the step a code
    matched, so a code made just before a step's end and checked just after moves the device's
    window a step back, and the clock's next step falls outside it."""
    device = TOTPDevice.objects.get(user=user, confirmed=True)
    totp = TOTP(base64.b32decode(secret_b32), device.step, device.t0)
    totp.time = device.t0 + (device.last_t + 1) * device.step
    return f"{totp.token():06d}"


def test_ten_wrong_passwords_lock_the_account_until_a_staff_member_unlocks_it(
    staff: User, caplog: pytest.LogCaptureFixture
) -> None:
    before = refusals()
    client = Client()
    for _ in range(9):
        assert sign_in(client, "operator", "guess").status_code == 200  # the form, again
    tenth = sign_in(client, "operator", "guess")
    assert tenth.status_code == 429 and b'id="locked-out"' in tenth.content
    # The right password is refused now, from this address and from any other.
    assert sign_in(client, "operator", PASSWORD).status_code == 429
    assert sign_in(Client(REMOTE_ADDR="198.51.100.4"), "operator", PASSWORD).status_code == 429
    assert refusals() == before + 3
    lines = [r.getMessage() for r in caplog.records if "staff sign-in" in r.getMessage()]
    assert "staff sign-in failed: password wrong (account 'operator', client 127.0.0.1)" in lines
    assert lines.count(
        "staff sign-in refused: locked out (account 'operator', client 127.0.0.1)") == 2
    assert all("\n" not in line for line in lines)

    call_command("staff", "unlock", "operator")
    answer = sign_in(Client(), "operator", PASSWORD)
    assert answer.status_code == 302 and answer["Location"] == "/admin/"


def test_a_staff_member_unlocks_an_account_in_the_admin(staff: User) -> None:
    for _ in range(10):
        sign_in(Client(), "operator", "guess")
    assert sign_in(Client(), "operator", PASSWORD).status_code == 429
    colleague = User.objects.create_superuser("colleague", password=PASSWORD)
    admin = Client(REMOTE_ADDR="198.51.100.20")
    assert sign_in(admin, "colleague", PASSWORD).status_code == 302
    attempts = "/admin/axes/accessattempt/"
    assert b"operator" in admin.get(attempts).content
    ids = [str(pk) for pk in AccessAttempt.objects.values_list("pk", flat=True)]
    confirmed = admin.post(attempts, {"action": "delete_selected", "_selected_action": ids,
                                      "post": "yes"})
    assert confirmed.status_code == 302 and not AccessAttempt.objects.filter(
        username="operator").exists()
    assert sign_in(Client(), "operator", PASSWORD).status_code == 302
    assert colleague.is_staff


@override_settings(RELAY_TRUSTED_PROXIES=("127.0.0.1/32",))
def test_failures_from_one_client_address_lock_that_address_behind_the_trusted_proxy(
    staff: User,
) -> None:
    """Ten failures on ten accounts from one address (X-Forwarded-For from the trusted proxy,
    the relay's rule) lock the address, not the accounts, and not the proxy's other clients."""
    guesser = {"HTTP_X_FORWARDED_FOR": "203.0.113.7"}
    for number in range(10):
        sign_in(Client(), f"user{number}", "guess", **guesser)
    assert sign_in(Client(), "operator", PASSWORD, **guesser).status_code == 429
    other = sign_in(Client(), "operator", PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.8")
    assert other.status_code == 302
    call_command("staff", "unlock", "--address", "203.0.113.7")
    assert sign_in(Client(), "operator", PASSWORD, **guesser).status_code == 302


@override_settings(ADMIN_REQUIRE_2FA=True)
def test_required_second_factor_enrolment_totp_recovery_codes_and_reset(staff: User) -> None:
    client = Client()
    assert sign_in(client, "operator", PASSWORD).status_code == 302
    # Signed in with a password only: no staff page, the login page sends to the enrolment.
    assert client.get("/admin/relayinfo/readiness/").status_code == 302
    assert client.get("/admin/api/").status_code == 302
    assert client.get(LOGIN)["Location"] == ENROL
    page = client.get(ENROL).content.decode()
    uri = re.search(r'id="otpauth-uri">([^<]+)<', page)
    assert uri and uri.group(1).startswith("otpauth://totp/Buzz%20relay%3Aoperator?secret=")
    secret = re.search(r'id="totp-secret">([A-Z2-7]+)<', page)
    assert secret and "<svg" in page  # the QR code, inline
    wrong = client.post(ENROL, {"otp_token": "000000" if totp_code(secret.group(1)) != "000000"
                                else "111111"})
    assert b"does not match" in wrong.content
    done = client.post(ENROL, {"otp_token": totp_code(secret.group(1))}).content.decode()
    codes = re.findall(r"<li><code>([^<]+)</code></li>", done)
    assert len(codes) == 10 and len(set(codes)) == 10
    assert client.get("/admin/relayinfo/readiness/").status_code == 200  # verified session
    assert b"You have a second factor" in client.get(ENROL).content  # no second secret

    # A new sign-in needs a code: the authenticator's next one (the enrolment took this step's;
    # tolerance 1 accepts the next), or a recovery code, once.
    with_totp = Client()
    assert sign_in(with_totp, "operator", PASSWORD,
                   next_totp_code(secret.group(1), staff)).status_code == 302
    assert with_totp.get("/admin/").status_code == 200
    with_code = Client()
    assert sign_in(with_code, "operator", PASSWORD, codes[0]).status_code == 302
    assert with_code.get("/admin/").status_code == 200
    # None, a used recovery code or a wrong code: refused, and counted as failed sign-ins.
    for token in ("", codes[0], "12"):
        refused = sign_in(Client(), "operator", PASSWORD, token)
        assert b"Enter the current code" in refused.content
    assert AccessAttempt.objects.get(username="operator").failures_since_start == 3

    # Reset: the devices are gone, their sessions no longer verified, enrolment again.
    call_command("staff", "reset-factor", "operator")
    assert not TOTPDevice.objects.exists() and not StaticDevice.objects.exists()
    assert with_totp.get("/admin/").status_code == 302
    again = Client()
    assert sign_in(again, "operator", PASSWORD).status_code == 302
    assert again.get(LOGIN)["Location"] == ENROL


def test_without_the_requirement_password_alone_serves_until_a_factor_is_enrolled(
    staff: User,
) -> None:
    client = Client()
    assert sign_in(client, "operator", PASSWORD).status_code == 302
    assert client.get("/admin/relayinfo/readiness/").status_code == 200
    secret = re.search(r'id="totp-secret">([A-Z2-7]+)<', client.get(ENROL).content.decode())
    assert secret
    client.post(ENROL, {"otp_token": totp_code(secret.group(1))})
    # Enrolled by choice: from now on the code is asked for.
    assert b"Enter the current code" in sign_in(Client(), "operator", PASSWORD).content


def test_staff_command_names_unknown_users_and_needs_a_target(
    staff: User, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        call_command("staff", "reset-factor", "nobody")
    assert exited.value.code == 1 and "no user named 'nobody'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        call_command("staff", "unlock")
    assert exited.value.code == 2


@override_settings(ADMIN_ALLOWED_NETWORKS=("10.0.0.0/8",))
def test_console_answers_404_outside_the_allowed_networks(staff: User) -> None:
    outside = Client(REMOTE_ADDR="192.0.2.1")
    for response in (outside.get(LOGIN), outside.post(LOGIN, {"username": "operator"}),
                     outside.get("/admin/api/")):
        assert response.status_code == 404 and response.json()["error"] == "not_found"
    assert outside.get("/healthz").status_code == 200  # the relay itself is not fenced
    assert Client(REMOTE_ADDR="10.1.2.3").get(LOGIN).status_code == 200
    with override_settings(RELAY_TRUSTED_PROXIES=("127.0.0.1/32",)):
        # Behind the trusted proxy the forwarded address counts, from anyone else it does not.
        assert Client().get(LOGIN, HTTP_X_FORWARDED_FOR="10.9.9.9").status_code == 200
        assert Client().get(LOGIN, HTTP_X_FORWARDED_FOR="192.0.2.9").status_code == 404
        assert outside.get(LOGIN, HTTP_X_FORWARDED_FOR="10.9.9.9").status_code == 404


@override_settings(SECURE_HSTS_SECONDS=600)
def test_the_public_scheme_is_the_relays_rule_not_a_client_header() -> None:
    """HSTS (sent only on secure requests) shows what Django believes about the scheme."""
    forged = Client().get(LOGIN, HTTP_X_BUZZ_PUBLIC_SCHEME="https")
    assert "Strict-Transport-Security" not in forged.headers
    with override_settings(RELAY_PUBLIC_URL="https://relay.example"):
        assert Client().get(LOGIN)["Strict-Transport-Security"] == "max-age=600"
    with override_settings(RELAY_TRUSTED_PROXIES=("127.0.0.1/32",)):
        proxied = Client().get(LOGIN, HTTP_X_FORWARDED_PROTO="https")
        assert proxied["Strict-Transport-Security"] == "max-age=600"


def test_check_deploy_is_clean_under_the_production_settings() -> None:
    """`manage.py check --deploy` with the README's production environment: no warning (the SSL
    redirect and, while off, HSTS are silenced on purpose in settings.py)."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "ADMIN_"))},
        "RELAY_PUBLIC_URL": "https://relay.example.com",
        "RELAY_TRUSTED_PROXIES": "127.0.0.1",
        "ADMIN_REQUIRE_2FA": "true",
        "DJANGO_SETTINGS_MODULE": "buzzrelay.settings",
        "RELAY_SIGNING_KEY": os.environ["RELAY_SIGNING_KEY"],
    }
    env.pop("SECRET_KEY", None)
    for hsts in ("", "31536000"):
        env["RELAY_HSTS_SECONDS"] = hsts
        result = subprocess.run(
            [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "no issues" in result.stdout


NOSTR_LOGIN = "/admin/nostr-login/"


def challenge_page(client: Client) -> tuple[str, str]:
    """(the URL to sign, the path to POST to), as the page's script has them (escapejs)."""
    page = client.get(NOSTR_LOGIN).content.decode()
    signed = re.search(r'\["u", "([^"]+)"\]', page)
    path = re.search(r'fetch\("([^"]+)"', page)
    assert signed and path
    return json.loads(f'"{signed.group(1)}"'), json.loads(f'"{path.group(1)}"')


def nostr_sign_in(client: Client, secret: str, *, tamper: bool = False) -> Any:
    """What the page's script does with a NIP-07 signer: sign the page's challenge URL (a
    NIP-98 event) and POST to it."""
    url, post_path = challenge_page(client)
    header = make_nip98_header(secret, url=url + ("x" if tamper else ""), method="POST")
    return client.generic("POST", post_path, b"", HTTP_AUTHORIZATION=header)


def test_nostr_sign_in_maps_a_key_to_its_staff_user_and_nothing_else(
    staff: User, capsys: pytest.CaptureFixture[str]
) -> None:
    key, community_admin = make_key(), make_key()
    Community.objects.create(host="team.example", name="Team",
                             admin_pubkeys=[community_admin.pubkey])
    call_command("staff", "nostr-key", "operator", "--pubkey", key.pubkey.upper())
    assert StaffNostrKey.objects.get().pubkey == key.pubkey
    client = Client()
    answer = nostr_sign_in(client, key.secret)
    assert answer.status_code == 200 and answer.json() == {"next": "/admin/"}
    assert client.get("/admin/relayinfo/readiness/").status_code == 200
    # A community's admin key is no staff account; a URL other than the challenge's fails.
    refused = nostr_sign_in(Client(), community_admin.secret)
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
    assert nostr_sign_in(Client(), key.secret, tamper=True).status_code == 401
    # The challenge is used up by the first POST: the same event again is refused.
    replayer = Client()
    url, post_path = challenge_page(replayer)
    assert url == f"http://testserver{post_path}"
    header = make_nip98_header(key.secret, url=url, method="POST")
    assert replayer.generic("POST", post_path, b"", HTTP_AUTHORIZATION=header).status_code == 200
    again = Client()
    again.cookies = replayer.cookies
    replayed = again.generic("POST", post_path, b"", HTTP_AUTHORIZATION=header)
    assert replayed.json()["error"] == "bad_challenge"
    # The password's limits hold: a locked account is refused with its key too.
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(Client(REMOTE_ADDR="198.51.100.9"), "operator", "guess")
    assert nostr_sign_in(Client(), key.secret).status_code == 429
    call_command("staff", "nostr-key", "operator", "--remove")
    assert not StaffNostrKey.objects.exists()
    with pytest.raises(SystemExit):
        call_command("staff", "nostr-key", "operator", "--pubkey", "npub1xyz")


@override_settings(ADMIN_REQUIRE_2FA=True)
def test_nostr_sign_in_still_asks_for_the_second_factor(staff: User) -> None:
    key = make_key()
    StaffNostrKey.objects.create(user=staff, pubkey=key.pubkey)
    device = TOTPDevice.objects.create(user=staff, name="authenticator", confirmed=True)
    client = Client()
    assert nostr_sign_in(client, key.secret).status_code == 200
    assert client.get("/admin/").status_code == 302
    assert client.get(LOGIN)["Location"] == ENROL
    assert b'id="verify-form"' in client.get(ENROL).content
    code = base64.b32encode(device.bin_key).decode()
    verified = client.post(ENROL, {"otp_token": totp_code(code)})
    assert verified.status_code == 302 and verified["Location"] == "/admin/"
    assert client.get("/admin/").status_code == 200
    # A wrong code verifies nothing (and counts as a failed sign-in).
    other = Client()
    assert nostr_sign_in(other, key.secret).status_code == 200
    assert b"does not match" in other.post(ENROL, {"otp_token": "12"}).content
    assert other.get("/admin/").status_code == 302
    assert AccessAttempt.objects.get(username="operator").failures_since_start == 1
