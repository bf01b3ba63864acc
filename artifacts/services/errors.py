"""Why a write was refused, as the NIP-01 `OK` prefixes name it.

Services raise these inside the write transaction (so everything rolls back); the ingest
service turns them into `OK false "<prefix>: <message>"`. Operators' tools show the message.
"""

from __future__ import annotations

from typing import ClassVar


class WriteRefused(Exception):
    prefix: ClassVar[str] = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def ok_message(self) -> str:
        return f"{self.prefix}: {self.message}"


class Invalid(WriteRefused):
    """The event breaks the protocol (shape, tags, artifact op sequence)."""

    prefix = "invalid"


class Restricted(WriteRefused):
    """The author may not do this. Messages never reveal what the author cannot read."""

    prefix = "restricted"


class Blocked(WriteRefused):
    """The relay does not accept this kind at all."""

    prefix = "blocked"


class Duplicate(WriteRefused):
    """The event is already stored: accepted (`OK true`), with no side effects."""

    prefix = "duplicate"
