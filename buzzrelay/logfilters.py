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
