"""buzz-admin serve: HTTP and WebSocket with the production ASGI server (buzzrelay/server.py).

The staff pages' static files are collected into STATIC_ROOT first when they changed since the
last start (one line says so); otherwise nothing is written.
"""

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
    from buzzrelay.server import metrics_directory, run_server
    from buzzrelay.static_files import StaticFilesError

    with metrics_directory():
        setup_django(None)
        try:
            run_server(host=args.host, port=args.port, workers=args.workers)
        except StaticFilesError as exc:
            fail(str(exc), code=2)
    return 0
