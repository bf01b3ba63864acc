"""Settings for bench/ingest.py's "pooled" runs: buzzrelay.settings with psycopg's pool.

Under ASGI each request runs its sync view on a thread of its own, so persistent connections
(CONN_MAX_AGE) open one PostgreSQL connection per request thread and leave it behind; a pool
shared by the process's threads is what ASGI deployments need. The benchmark measures both.
"""

from typing import Any

from buzzrelay.settings import *  # noqa: F403
from buzzrelay.settings import DATABASES

_default: dict[str, Any] = dict(DATABASES["default"])
_options: dict[str, Any] = dict(_default["OPTIONS"])
DATABASES["default"] = {
    **_default,
    "CONN_MAX_AGE": 0,
    "CONN_HEALTH_CHECKS": False,
    "OPTIONS": {**_options, "pool": {"min_size": 2, "max_size": 10}},
}
