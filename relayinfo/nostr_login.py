"""Staff sign-in with a Nostr key (NIP-07 signer in the browser, NIP-98 event on the wire).

GET /admin/nostr-login/ puts a one-time challenge in the session and shows a button; the page's
script asks the browser's NIP-07 signer (`window.nostr.signEvent`) for a kind-27235 event whose
`u` tag is this URL with `?challenge=<it>` and `method` POST, and sends it as
`Authorization: Nostr <base64>` (nostr.nip98 verifies it: signature, 60 s window, URL, method).
The challenge is used up by the first POST, so a captured event cannot be replayed, and it binds
the event to this browser's session. The key must be mapped to an active staff user
(relayinfo.models.StaffNostrKey, `buzz-admin staff nostr-key`); the password's limits (the
account's lock, the address's failures) apply; with ADMIN_REQUIRE_2FA the second factor is still
asked for (relayinfo.admin_login.enrol_view).
"""

from __future__ import annotations

import secrets
import time

from axes.handlers.proxy import AxesProxyHandler
from django.contrib import admin
from django.contrib.auth import login
from django.contrib.auth.signals import user_login_failed
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from nostr.nip98 import Nip98Error, verify_nip98
from relaycore.http import absolute_url, json_error, json_response, public_netloc, public_scheme
from relayinfo import staff

CHALLENGE_KEY = "buzz_nostr_challenge"
CHALLENGE_SECONDS = 300


def nostr_login_view(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        return _sign_in(request)
    challenge = secrets.token_urlsafe(24)
    request.session[CHALLENGE_KEY] = [challenge, int(time.time())]
    path = f"{reverse('admin:nostr_login')}?challenge={challenge}"
    context = {
        **admin.site.each_context(request),
        "title": "Sign in with a Nostr key",
        "post_path": path,
        "signed_url": f"{public_scheme(request)}://{public_netloc(request)}{path}",
    }
    return TemplateResponse(request, "admin/buzz_nostr_login.html", context)


def _sign_in(request: HttpRequest) -> HttpResponse:
    expected = request.session.pop(CHALLENGE_KEY, None)
    given = request.GET.get("challenge", "")
    if (
        not isinstance(expected, list)
        or not secrets.compare_digest(str(expected[0]), given)
        or time.time() - int(expected[1]) > CHALLENGE_SECONDS
    ):
        return json_error(400, "bad_challenge",
                          "the sign-in challenge is missing, used or expired: reload the page")
    try:
        auth = verify_nip98(request.headers.get("Authorization"), url=absolute_url(request),
                            method="POST", body=request.body, now=int(time.time()))
    except Nip98Error as exc:
        return json_error(401, "unauthorized", str(exc))
    user = staff.staff_user_of_pubkey(auth.pubkey)
    if user is None:
        staff.record_login_failure(request, username=f"nostr:{auth.pubkey}", reason="nostr_key")
        # Counted against the client address by django-axes (no account to count against).
        user_login_failed.send(sender=__name__, request=request, credentials={})
        return json_error(403, "forbidden", "this key is not a staff member's")
    if not AxesProxyHandler.is_allowed(request, {"username": user.get_username()}):
        return staff.lockout_response(request)
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    return json_response({"next": reverse("admin:index")})
