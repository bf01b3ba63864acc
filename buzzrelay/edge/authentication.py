"""NIP-98 as a DRF authentication class (PROTOCOL.md section 3)."""

from __future__ import annotations

import time
from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from buzzrelay.edge.parsers import request_body
from buzzrelay.http import absolute_url
from buzzrelay.nip98_auth import REPLAY_MESSAGE, WINDOW_SECONDS, claim_auth_event
from nostr.nip98 import Nip98Auth, Nip98Error, verify_nip98
from relayinfo.metrics import record_nip98_check

__all__ = ["Nip98Authentication", "NostrUser"]


class NostrUser:
    """`request.user` of a request signed with NIP-98: the pubkey, never a Django account."""

    is_authenticated = True
    is_anonymous = False

    def __init__(self, pubkey: str) -> None:
        self.pubkey = pubkey

    def __str__(self) -> str:
        return self.pubkey


class Nip98Authentication(BaseAuthentication):
    """`Authorization: Nostr <base64 event>` signed for this URL, method and body, used once.

    `authenticate` is a coroutine: the relay's views run it on the event loop
    (`RelayAPIView`), where the replay claim is one Redis round trip.
    """

    async def authenticate(self, request: Request) -> tuple[NostrUser, Nip98Auth]:  # type: ignore[override]
        django_request: Any = request._request
        record_nip98_check()
        try:
            auth = verify_nip98(
                # META, not `request.headers`: that builds the whole header map per request.
                django_request.META.get("HTTP_AUTHORIZATION"),
                url=absolute_url(django_request),
                method=request.method or "",
                body=request_body(request) or None,
                now=int(time.time()),
                window=WINDOW_SECONDS,
            )
        except Nip98Error as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from None
        if not await claim_auth_event(auth.event_id, expires_at=auth.created_at + WINDOW_SECONDS):
            raise exceptions.AuthenticationFailed(REPLAY_MESSAGE)
        return NostrUser(auth.pubkey), auth

    def authenticate_header(self, request: Request) -> str:
        return "Nostr"
