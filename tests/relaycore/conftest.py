"""The real relay some of these tests talk to: `buzz-admin serve` on the pytest database."""

from __future__ import annotations

from tests.relay_server import relay_server

__all__ = ["relay_server"]
