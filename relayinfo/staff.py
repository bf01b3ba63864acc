"""The staff console's accounts: second factors, recovery codes, sign-in failures and lockouts.

The limits themselves are django-axes' (AccessAttempt rows in PostgreSQL, shared by every worker
and instance, settings.AXES_*); the second factor is django-otp's (a TOTP device, and a static
device holding the recovery codes). Here: the writes around them, one line per failure or
refusal in the log, and the counts in /metrics (relaycore.metrics), so the admin's forms and
views and `buzz-admin staff` share one implementation.
"""

from __future__ import annotations

import logging

from axes.utils import reset as axes_reset
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_otp import devices_for_user, match_token
from django_otp.models import Device
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from relaycore.http import client_address
from relaycore.metrics import (
    ADMIN_LOGIN_FAILED_NOSTR_KEY,
    ADMIN_LOGIN_FAILED_PASSWORD,
    ADMIN_LOGIN_FAILED_SECOND_FACTOR,
    ADMIN_LOGIN_REFUSALS,
)
from relayinfo.models import StaffNostrKey

logger = logging.getLogger("buzzrelay.console")

RECOVERY_CODES = 10
TOTP_NAME = "authenticator"
RECOVERY_NAME = "recovery codes"


FAILURE_COUNTERS = {
    "password": ADMIN_LOGIN_FAILED_PASSWORD,
    "second_factor": ADMIN_LOGIN_FAILED_SECOND_FACTOR,
    "nostr_key": ADMIN_LOGIN_FAILED_NOSTR_KEY,
}


class UnknownStaffUser(LookupError):
    pass


def record_login_failure(request: HttpRequest, *, username: str, reason: str) -> None:
    """One line and one count per failed sign-in (`reason`: password, second_factor or
    nostr_key)."""
    FAILURE_COUNTERS[reason].inc()
    logger.warning("staff sign-in failed: %s wrong (account %r, client %s)",
                   reason.replace("_", " "), username[:150], client_address(request))


def lockout_response(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict[str, object] | None = None,
) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: a sign-in refused because the account or the client address
    reached ADMIN_LOGIN_FAILURE_LIMIT. Logged on one line and counted; answered 429."""
    given = getattr(request, "axes_credentials", None) or {}
    username = str(given.get("username", "") if isinstance(given, dict) else "")
    ADMIN_LOGIN_REFUSALS.inc()
    logger.warning("staff sign-in refused: locked out (account %r, client %s)",
                   username[:150], client_address(request))
    context = {
        **admin.site.each_context(request),
        "title": "Sign-in locked",
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "cooloff_minutes": (
            int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
            if settings.AXES_COOLOFF_TIME else None
        ),
    }
    return render(request, "admin/buzz_locked_out.html", context, status=429)


def has_second_factor(user: User) -> bool:
    return any(True for _ in devices_for_user(user, confirmed=True))


def verify_second_factor(user: User, token: str) -> Device | None:
    """The confirmed device that accepts `token` (a TOTP code, or a recovery code, which is
    used up), or None. django-otp throttles each device's failures itself."""
    token = "".join(token.split())
    if not token:
        return None
    device: Device | None = match_token(user, token)
    return device


def pending_totp_device(user: User) -> TOTPDevice:
    """The user's TOTP device waiting for its first code (made on first use): its secret is
    what the enrolment page shows until a code confirms it."""
    device, _ = TOTPDevice.objects.get_or_create(user=user, confirmed=False,
                                                 defaults={"name": TOTP_NAME})
    return device


def confirm_totp_device(*, user: User, token: str) -> tuple[TOTPDevice, list[str]]:
    """Confirm the pending TOTP device with a code from the authenticator, and issue fresh
    recovery codes (returned once, in clear). Raises ValueError when the code is wrong.

    Under the device's row lock: two submissions of one code confirm it once."""
    with transaction.atomic():
        device = TOTPDevice.objects.select_for_update().filter(
            user=user, confirmed=False
        ).first()
        if device is None or not device.verify_token("".join(token.split())):
            raise ValueError("the code does not match the authenticator's secret")
        device.confirmed = True
        device.save(update_fields=["confirmed"])
        return device, replace_recovery_codes(user=user)


def replace_recovery_codes(*, user: User) -> list[str]:
    """RECOVERY_CODES new single-use codes; the previous ones stop working."""
    with transaction.atomic():
        StaticDevice.objects.filter(user=user).delete()
        device = StaticDevice.objects.create(user=user, name=RECOVERY_NAME, confirmed=True)
        codes = [StaticToken.random_token() for _ in range(RECOVERY_CODES)]
        StaticToken.objects.bulk_create([StaticToken(device=device, token=c) for c in codes])
        return codes


def staff_user(username: str) -> User:
    try:
        user: User = User.objects.get_by_natural_key(username)
    except User.DoesNotExist:
        raise UnknownStaffUser(f"no user named {username!r}") from None
    return user


def reset_second_factor(*, username: str) -> int:
    """Remove every second factor of `username` (authenticator and recovery codes); the next
    sign-in asks for a new enrolment when ADMIN_REQUIRE_2FA is on. Sessions verified by the
    removed devices are no longer verified. Returns how many devices were removed."""
    user = staff_user(username)
    removed = 0
    with transaction.atomic():
        for device in list(devices_for_user(user, confirmed=None)):
            device.delete()
            removed += 1
    logger.warning("staff second factor reset (account %r, %d devices removed)", username,
                   removed)
    return removed


def unlock(*, username: str | None = None, address: str | None = None) -> int:
    """Forget the failed sign-ins of an account and/or a client address (what locks them);
    returns how many attempt records were removed."""
    removed = 0
    if username is not None:
        removed += int(axes_reset(username=username))
    if address is not None:
        removed += int(axes_reset(ip=address))
    logger.warning("staff sign-in unlocked (account %r, client %s, %d records)", username,
                   address, removed)
    return removed


def staff_user_of_pubkey(pubkey: str) -> User | None:
    """The active staff user `pubkey` signs in as, or None. Only StaffNostrKey maps a key to
    staff: being a community's admin grants nothing here."""
    mapping = StaffNostrKey.objects.select_related("user").filter(pubkey=pubkey).first()
    if mapping is None or not (mapping.user.is_active and mapping.user.is_staff):
        return None
    return mapping.user


def set_nostr_key(*, username: str, pubkey: str | None) -> None:
    """Let `username` sign in with `pubkey` (64 hex, validated by the caller), replacing any
    key it had; None removes it."""
    user = staff_user(username)
    with transaction.atomic():
        StaffNostrKey.objects.filter(user=user).delete()
        if pubkey is not None:
            StaffNostrKey.objects.create(user=user, pubkey=pubkey)
    logger.warning("staff Nostr key %s (account %r%s)", "set" if pubkey else "removed", username,
                   f", pubkey {pubkey}" if pubkey else "")
