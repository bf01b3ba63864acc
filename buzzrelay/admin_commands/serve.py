"""buzz-admin serve: HTTP and WebSocket with the production ASGI server."""

from __future__ import annotations

import argparse
import os

from buzzrelay.cli import fail, setup_django

HELP = "serve HTTP and WebSocket with the production server (needs DATABASE_URL)"
# Configuration is checked here, then again in each worker process the server starts.
SETUP_DJANGO = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=1, help="worker processes")


def run(args: argparse.Namespace) -> int:
    if args.database_url:
        os.environ["DATABASE_URL"] = args.database_url
    if not os.environ.get("DATABASE_URL"):
        fail(
            "DATABASE_URL is not set: serve needs the deployment's PostgreSQL "
            "(the embedded database is for bin/quickstart only)",
            code=2,
        )
    if args.workers > 1 and not os.environ.get("REDIS_URL"):
        # Without Redis the channel layer is in-process: a write accepted by one worker would
        # never reach the WebSocket subscribers of another, and rate limits would be per worker.
        fail(
            "--workers above 1 needs REDIS_URL: without Redis each worker process has its own "
            "channel layer, and live events would not cross between workers",
            code=2,
        )
    setup_django(None)
    import uvicorn
    from django.conf import settings

    uvicorn.run(
        "buzzrelay.asgi:application",
        host=args.host,
        port=args.port,
        workers=args.workers,
        # The ASGI lifespan registers the instance in the fleet and deregisters it on shutdown.
        lifespan="on",
        log_level="warning",
        # NIP-11 limitation.max_message_length: a larger frame closes the connection.
        ws_max_size=settings.RELAY_MAX_MESSAGE_LENGTH,
        # No permessage-deflate: every live event is fanned out to many sockets, and deflate
        # compresses it again for each one (measured: ~75% more CPU per delivered event).
        ws_per_message_deflate=False,
        timeout_graceful_shutdown=10,
        # The relay decides which proxies' X-Forwarded-* headers to believe
        # (RELAY_TRUSTED_PROXIES, buzzrelay/http.py); uvicorn's own rewriting (on by default for
        # 127.0.0.1) would apply a second, different rule first.
        proxy_headers=False,
        # No per-request access log: at 1,000 requests/s it is work and noise; errors are logged.
        access_log=False,
    )
    return 0
