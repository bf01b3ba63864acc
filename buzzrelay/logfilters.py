"""Logging filters named by settings.LOGGING."""

from __future__ import annotations

import logging


class WithoutTraceback(logging.Filter):
    """Log the record as its one line: for client mistakes Django logs with a traceback (a
    malformed Host header, a refused body), which say nothing about the relay's own code."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        return True


class ClientGarbage(logging.Filter):
    """The server's lines about what a client sent wrong (invalid UTF-8 in a text frame, an
    unparsable request): one line each, no traceback, and at most one a `INTERVAL` per message,
    the ones held back counted in the next. A client may send garbage as fast as it likes; the
    log must not grow with it (issue 37: a UnicodeDecodeError traceback per frame)."""

    INTERVAL = 10.0
    MESSAGES = frozenset({
        "Invalid UTF-8 sequence received from client.",
        "Invalid HTTP request received.",
    })

    def __init__(self, name: str = "") -> None:
        super().__init__(name)
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        if message not in self.MESSAGES:
            return True
        record.exc_info = None
        record.exc_text = None
        if record.created - self._last.get(message, -self.INTERVAL) < self.INTERVAL:
            self._held[message] = self._held.get(message, 0) + 1
            return False
        self._last[message] = record.created
        if held := self._held.pop(message, 0):
            record.msg = f"{message} ({held} more in the last {self.INTERVAL:g} s)"
        return True
