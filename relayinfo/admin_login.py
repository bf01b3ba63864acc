"""The staff console's sign-in: the admin's password form plus a second factor, and the page
where a staff member enrols one (relayinfo.staff does the writes).

A staff user with a confirmed device must give its code (or a recovery code) with the password;
one without may sign in with the password alone, and, with ADMIN_REQUIRE_2FA, reaches only the
enrolment page until a code confirms an authenticator (relayinfo.admin_site.has_permission).
A wrong code counts as a failed sign-in for the limits (django-axes), like a wrong password.
"""

from __future__ import annotations

from typing import Any, cast

import segno
from django import forms
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.models import User
from django.contrib.auth.signals import user_login_failed
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django_otp import login as otp_login

from relayinfo import staff


class StaffLoginForm(AdminAuthenticationForm):
    otp_token = forms.CharField(
        required=False,
        label="Authentication code",
        help_text="From your authenticator app, or one of your recovery codes.",
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "spellcheck": "false"}),
    )

    def clean(self) -> dict[str, Any]:
        try:
            return super().clean()
        except ValidationError:
            locked = getattr(self.request, "axes_locked_out", False)
            if self.user_cache is None and not locked and self.request is not None:
                staff.record_login_failure(self.request, username=self._username(),
                                           reason="password")
            raise

    def confirm_login_allowed(self, user: User) -> None:  # type: ignore[override]
        super().confirm_login_allowed(user)  # active staff only
        if not staff.has_second_factor(user):
            return
        device = staff.verify_second_factor(user, self.cleaned_data.get("otp_token") or "")
        if device is None:
            assert self.request is not None
            staff.record_login_failure(self.request, username=self._username(),
                                       reason="second_factor")
            # Counted by django-axes like a wrong password (its user_login_failed receiver).
            user_login_failed.send(sender=__name__, request=self.request,
                                   credentials={"username": self._username()})
            raise ValidationError(
                "Enter the current code from your authenticator app, or a recovery code.",
                code="invalid_token",
            )
        # django-otp's user_logged_in receiver marks the session verified by this device.
        user.otp_device = device  # type: ignore[attr-defined]

    def _username(self) -> str:
        return str(self.cleaned_data.get("username") or "")


class TokenForm(forms.Form):
    otp_token = forms.CharField(label="Code from the app", max_length=16)


def enrol_view(request: HttpRequest) -> HttpResponse:
    """GET: the authenticator's secret (otpauth URI, QR code, text) while none is confirmed.
    POST: the first code confirms it, verifies this session and shows the recovery codes once.
    Reached by any active staff user signed in with a password (admin_site wraps it)."""
    user = cast(User, request.user)  # active staff: admin_site's decorator
    context: dict[str, Any] = {**admin.site.each_context(request), "title": "Second factor"}
    form = TokenForm(request.POST or None)
    if staff.has_second_factor(user):
        # Replacing a factor is `buzz-admin staff reset-factor`: never this page, which a
        # password (or a Nostr key) alone reaches. A session signed in without the code (the
        # Nostr sign-in) gives it here.
        context.update(enrolled=True, form=form)
        if request.method == "POST" and form.is_valid():
            device = staff.verify_second_factor(user, form.cleaned_data["otp_token"])
            if device is not None:
                otp_login(request, device)
                return redirect("admin:index")
            staff.record_login_failure(request, username=user.get_username(),
                                       reason="second_factor")
            user_login_failed.send(sender=__name__, request=request,
                                   credentials={"username": user.get_username()})
            form.add_error("otp_token", "That code does not match.")
        return TemplateResponse(request, "admin/buzz_two_factor.html", context)
    if request.method == "POST" and form.is_valid():
        try:
            device, codes = staff.confirm_totp_device(user=user,
                                                      token=form.cleaned_data["otp_token"])
        except ValueError:
            form.add_error("otp_token", "That code does not match; check the app's clock and "
                                        "enter the current code.")
        else:
            otp_login(request, device)
            context.update(enrolled=True, recovery_codes=codes)
            return TemplateResponse(request, "admin/buzz_two_factor.html", context)
    device = staff.pending_totp_device(user)
    uri = device.config_url
    context.update(
        form=form,
        otpauth_uri=uri,
        secret=uri.split("secret=", 1)[1].split("&", 1)[0],
        qr_svg=segno.make(uri, error="m").svg_inline(scale=4),
    )
    return TemplateResponse(request, "admin/buzz_two_factor.html", context)
