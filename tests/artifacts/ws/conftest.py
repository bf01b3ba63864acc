"""The WebSocket tests share one relay server per module (tests/relay_server.py)."""

from tests.relay_server import relay_server

__all__ = ["relay_server"]
