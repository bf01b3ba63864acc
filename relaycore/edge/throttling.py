"""The address and pubkey limits as DRF throttles, on the relay's token buckets.

`relaycore.ratelimit` keeps the buckets (Redis, shared by every instance; in-process while Redis
is down); these classes put them in DRF's throttle interface, awaited (`allow_request_async`:
the buckets are a Redis round trip; DRF's synchronous `allow_request` refuses to run), and
`wait()` gives the seconds `Retry-After` says.
"""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from relaycore.http import client_address
from relaycore.ratelimit import address_wait, pubkey_wait

__all__ = ["AddressRateThrottle", "BucketThrottle", "PubkeyRateThrottle"]


class BucketThrottle(BaseThrottle):
    def __init__(self) -> None:
        self._wait: float | None = None

    def allow_request(self, request: Request, view: Any) -> bool:
        raise RuntimeError("the relay's limits run on the event loop: RelayAPIView awaits "
                           "allow_request_async")

    async def allow_request_async(self, request: Request, view: Any) -> bool:
        raise NotImplementedError

    def wait(self) -> float | None:
        return self._wait


class AddressRateThrottle(BucketThrottle):
    """Per client address; runs before any signature is verified (PROTOCOL.md section 3)."""

    async def allow_request_async(self, request: Request, view: Any) -> bool:
        self._wait = await address_wait(client_address(request._request))
        return self._wait is None


class PubkeyRateThrottle(BucketThrottle):
    """Per authenticated pubkey (`request.user` is a `NostrUser`)."""

    async def allow_request_async(self, request: Request, view: Any) -> bool:
        self._wait = await pubkey_wait(request.user.pubkey)
        return self._wait is None
