"""Client garbage is one log line at most, rate-limited, never a traceback
(buzzrelay.logfilters.ClientGarbage on uvicorn's error logger: buzzrelay.server.log_config)."""

from __future__ import annotations

import logging
import sys

from buzzrelay.logfilters import ClientGarbage
from buzzrelay.server import log_config


def _record(message: str, created: float, *, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            b"\xff".decode()
        except UnicodeDecodeError:
            exc_info = sys.exc_info()
    record = logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, message, None,
                               exc_info)
    record.created = created
    return record


def test_a_flood_of_the_same_garbage_is_one_line_per_interval_without_traceback() -> None:
    garbage = ClientGarbage()
    message = "Invalid UTF-8 sequence received from client."
    passed = [r for r in (_record(message, 1000 + n * 0.01, exc=True) for n in range(500))
              if garbage.filter(r)]
    assert len(passed) == 1 and passed[0].exc_info is None
    later = _record(message, 1000 + ClientGarbage.INTERVAL + 5, exc=True)
    assert garbage.filter(later) and "499 more" in later.getMessage()


def test_the_servers_own_errors_pass_untouched() -> None:
    garbage = ClientGarbage()
    record = _record("Exception in ASGI application\n", 1000, exc=True)
    assert garbage.filter(record) and record.exc_info is not None
    assert all(garbage.filter(_record("Exception in ASGI application\n", 1000 + n))
               for n in range(3))


def test_every_server_logs_through_the_filter() -> None:
    config = log_config()
    assert config["loggers"]["uvicorn.error"]["filters"] == ["client_garbage"]
    assert config["filters"]["client_garbage"]["()"] == "buzzrelay.logfilters.ClientGarbage"
