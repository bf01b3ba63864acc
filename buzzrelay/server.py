"""The relay's server: uvicorn running `buzzrelay.asgi:application` (`build_application()`).

`buzz-admin serve` calls `run_server` after checking its environment, the quickstart calls it
after starting its embedded PostgreSQL (both within `metrics_directory()`), and the test suite's
relay servers are `buzz-admin serve` subprocesses: one set of server options, one application,
the ASGI lifespan (fleet registration) on in all three. The static files are collected first
when they changed.
"""

from __future__ import annotations

import copy
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

APPLICATION = "buzzrelay.asgi:application"
METRICS_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


@contextmanager
def metrics_directory() -> Iterator[Path]:
    """PROMETHEUS_MULTIPROC_DIR for the server's processes, set before anything imports
    prometheus_client (Django's set-up does): each worker writes its metrics there and a scrape
    of any worker sums them (relaycore.metrics).

    The operator's directory when PROMETHEUS_MULTIPROC_DIR is set, emptied of an earlier run's
    files first (their counts would be added again); else a new temporary one, removed when
    the server stops.
    """
    configured = os.environ.get(METRICS_DIR_VARIABLE)
    if configured:
        directory = Path(configured)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.db"):
            stale.unlink()
        yield directory
        return
    directory = Path(tempfile.mkdtemp(prefix="buzz-metrics-"))
    os.environ[METRICS_DIR_VARIABLE] = str(directory)
    try:
        yield directory
    finally:
        os.environ.pop(METRICS_DIR_VARIABLE, None)
        shutil.rmtree(directory, ignore_errors=True)


def uvicorn_options() -> dict[str, Any]:
    """The options every relay server runs with (after Django is configured)."""
    from django.conf import settings

    return {
        # uvicorn's httptools and websockets-sansio protocols with the per-connection bounds
        # uvicorn lacks (request head size, count and time; WebSocket reads only as fast as
        # the client reads): relaycore/connection_limits.py, chosen by bench/connection_bounds.py.
        "http": "relaycore.connection_limits:BoundedHttpToolsProtocol",
        "ws": "relaycore.connection_limits:BoundedWebSocketProtocol",
        "log_config": log_config(),
        # The ASGI lifespan registers the instance in the fleet and deregisters it on shutdown.
        "lifespan": "on",
        "log_level": "warning",
        # NIP-11 limitation.max_message_length: a larger frame closes the connection.
        "ws_max_size": settings.RELAY_MAX_MESSAGE_LENGTH,
        # No permessage-deflate: every live event is fanned out to many sockets, and deflate
        # compresses it again for each one (measured: ~75% more CPU per delivered event).
        "ws_per_message_deflate": False,
        "timeout_graceful_shutdown": 10,
        # The relay decides which proxies' X-Forwarded-* headers to believe
        # (RELAY_TRUSTED_PROXIES, relaycore/http.py); uvicorn's own rewriting (on by default for
        # 127.0.0.1) would apply a second, different rule first.
        "proxy_headers": False,
        # No per-request access log: at 1,000 requests/s it is work and noise; errors are logged.
        "access_log": False,
    }


def log_config() -> dict[str, Any]:
    """uvicorn's logging, with the client's mistakes it logs (a traceback per invalid UTF-8
    frame) cut to one rate-limited line (buzzrelay.logfilters.ClientGarbage)."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["client_garbage"] = {
        "()": "buzzrelay.logfilters.ClientGarbage"
    }
    config["loggers"].setdefault("uvicorn.error", {})["filters"] = ["client_garbage"]
    return config


def run_server(*, host: str, port: int, workers: int = 1, out: TextIO = sys.stdout) -> None:
    """Collect the static files if they changed, then serve until SIGINT or SIGTERM.

    Raises `buzzrelay.static_files.StaticFilesError` when the files cannot be collected.
    """
    import uvicorn

    from buzzrelay.static_files import collect_static

    collect_static(out=out)
    uvicorn.run(APPLICATION, host=host, port=port, workers=workers, **uvicorn_options())
