"""Placeholder until the WebSocket issue lands: refuses every WebSocket."""

from channels.generic.websocket import WebsocketConsumer


class _Refuse(WebsocketConsumer):
    def connect(self) -> None:
        self.close()


websocket_application = _Refuse.as_asgi()
