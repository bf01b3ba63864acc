"""What can go wrong while keeping a collection, as exceptions with one-line messages.

Every message is written for the person running `buzz-sync`: it names the relay or file involved
and what to do, and never needs a traceback to be understood.
"""

from __future__ import annotations


class SyncError(Exception):
    """Base class: syncing stopped; ``str()`` is one line fit for a terminal."""


class BadKey(SyncError):
    """The key file is missing, unreadable or holds no valid secp256k1 secret."""


class RelayUnreachable(SyncError):
    """The relay could not be reached (connection refused, DNS, timeouts) after retrying."""


class Unauthorized(SyncError):
    """The relay refused our NIP-98 authentication (HTTP 401)."""


class UnknownCommunity(SyncError):
    """No community is served at the relay URL's host (HTTP 404 ``unknown_community``)."""


class RelayBusy(SyncError):
    """The relay kept answering 429 or 503 for longer than the retry policy allows."""


class RelayRejected(SyncError):
    """The relay refused the request for a reason retrying cannot fix (a 4xx other than 401)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"relay refused the request: HTTP {status} {code}: {message}")
        self.status = status
        self.code = code


class ProtocolViolation(SyncError):
    """The relay answered something PROTOCOL.md does not allow; nothing of it was applied."""


class ConcurrentSync(SyncError):
    """Another process advanced this collection while our page was in flight; nothing applied."""
