"""Django settings, filled from the validated environment (relaycore.config)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import cast

from psycopg_pool import ConnectionPool

from buzzrelay import VERSION
from nostr.events import EventLimits
from relaycore.config import load_config
from relaycore.redis_topology import (
    REDIS_TIMEOUT_SECONDS,
    channel_layer_host,
    sentinel_cache_options,
)

BASE_DIR = Path(__file__).resolve().parent.parent
# psycopg prepares a statement after this many executions on a connection; explicit
# `prepare=True` prepares at once. Effectively: only when asked.
PREPARE_ONLY_WHEN_ASKED = 2**31 - 1
# How long psycopg_pool keeps one reconnection series going (the `_pool` comment says why).
POOL_RECONNECT_SECONDS = 2.0
CONFIG = load_config()

SECRET_KEY = CONFIG.secret_key
DEBUG = CONFIG.debug
# Hosts are checked by the community lookup (unknown host: a JSON 404 from the relay), so
# Django's own Host validation, which answers with an HTML 400, stays out of the way.
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    # Django's admin with the relay's site (adds the staff deployment-readiness page).
    "relayinfo.admin_apps.BuzzAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "artifacts",
    "relayinfo",
    # The staff console's sign-in limits and second factor (buzzrelay/settings.py, "Staff
    # console" below).
    "axes",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "django_otp.plugins.otp_static",
    # No models: `manage.py` commands for every `buzz-admin` subcommand (buzzrelay/management).
    "buzzrelay",
]

MIDDLEWARE = [
    # First: the public scheme by the relay's address rules (HSTS, CSRF and secure cookies read
    # it), and ADMIN_ALLOWED_NETWORKS' 404 before anything of the console runs.
    "buzzrelay.console.ConsoleMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # request.user.is_verified(): the session's second factor (relayinfo.admin_site).
    "django_otp.middleware.OTPMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Answers a sign-in refused because the account or address is locked out (after the
    # view, which raised the flag).
    "axes.middleware.AxesMiddleware",
    # Last, and sync-only, on purpose: Django runs every middleware before it in the same mode,
    # so under ASGI the whole chain runs on one thread. First in the list it made the others
    # async, and each of their hooks then paid a thread hop (34 per request: /healthz took
    # 7.7 ms in-process, 1.1 ms after). Its checks depend on none of the others' work.
    "relaycore.middleware.RelayHttpMiddleware",
]

ROOT_URLCONF = "buzzrelay.urls"
ASGI_APPLICATION = "buzzrelay.asgi.application"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The repository's top-level templates/ (the project card's layout), reached through
        # buzzrelay/templates, a link to it, so the relay's wheel carries them as the package's
        # data (pyproject's package-data) and an installed relay finds them in its package;
        # first, so the relay's admin/index.html overrides the admin's own.
        "DIRS": [Path(__file__).parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

RELAY_VERSION = VERSION
# Readiness item 4: every connection names the instance, its stamping capability and key id,
# so a writer of an older version shows up in pg_stat_activity.
RELAY_APPLICATION_NAME = f"buzzrelay/{VERSION} stamps=1 key={CONFIG.relay_pubkey[:8]}"

if CONFIG.database is not None:
    _db = CONFIG.database
    # The one definition of both pools' parameters: Django's (below) and the asyncio pool of the
    # fast reads (artifacts.selectors.async_reads takes these through relaycore.db.pool_options).
    _pool = {
        "min_size": 1,
        "max_size": CONFIG.database_pool_size,
        "timeout": 5,
        "max_idle": 300,
        # An outage ends when PostgreSQL returns. psycopg_pool retries a lost connection 1, 2,
        # 4, 8 ... s apart, doubling until `reconnect_timeout` (5 min by default): after a 60 s
        # outage its next attempt could come 60 s after the database was back, the relay
        # answering 503 all along. The pool has no public cap on the backoff (its
        # AttemptWithBackoff is private and read as a module global; overriding
        # `_add_connection` would copy private code), but `reconnect_timeout` is public: a
        # short one ends each attempt's series after a second or two (delays 1 s, then at most
        # the rest of the 2 s), and the pool gives the slot up. The next checkout then grows the
        # pool with a fresh series that connects at once (psycopg_pool's `_maybe_grow_pool`),
        # and checkouts keep coming during an outage (clients retry, /readyz is polled), so
        # the first connection after the return is at most ~1 s away. No `reconnect_failed`
        # callback restarts the series: without demand there is nothing to wait for, and an
        # endless background series would only log.
        "reconnect_timeout": POOL_RECONNECT_SECONDS,
        "check": ConnectionPool.check_connection,
    }
    DATABASES = {
        "default": {
            **_db.django_settings(),
            # Under ASGI every request runs its sync view on a thread of its own: persistent
            # connections (CONN_MAX_AGE) would leave one PostgreSQL connection per thread
            # behind (measured: "too many clients" 503s under load). A pool shared by the
            # process's threads bounds them; each checkout is health-checked, so a restarted
            # PostgreSQL is reconnected to without restarting the relay.
            "CONN_MAX_AGE": 0,
            # Behind transaction pooling a server-side cursor (QuerySet.iterator(), WITH HOLD
            # outside a transaction) would outlive the transaction that pins its connection.
            "DISABLE_SERVER_SIDE_CURSORS": CONFIG.database_pooler == "transaction",
            "OPTIONS": {
                **_db.options,
                "application_name": RELAY_APPLICATION_NAME,
                "connect_timeout": 5,
                # Django turns prepared statements off (None). The reads prepare their hot
                # statements explicitly (artifacts.selectors.budget.execute_prepared); a threshold
                # no ORM query reaches keeps everything else unprepared, as Django has it.
                # DATABASE_PREPARED_STATEMENTS=false (a transaction-mode pooler) turns them off.
                "prepare_threshold": (
                    PREPARE_ONLY_WHEN_ASKED if CONFIG.database_prepared_statements else None
                ),
                "pool": _pool,
            },
            "TEST": {"NAME": f"test_{_db.name}"},
        }
    }
    if CONFIG.replica is not None:
        # A hot standby for the reads that may lag (artifacts.selectors.standby): the primary's
        # pool and options, its own host. Rounds, the fence and every write stay on "default".
        DATABASES["replica"] = {
            **DATABASES["default"],
            **CONFIG.replica.django_settings(),
            "CONN_MAX_AGE": 0,
            "OPTIONS": {
                **cast(dict[str, object], DATABASES["default"]["OPTIONS"]),
                # A standby that is down costs a read at most this long once, then is skipped
                # for a while (artifacts.selectors.standby), and the read goes to the primary.
                "connect_timeout": 2,
                "pool": {**_pool, "timeout": 1},
                **CONFIG.replica.options,
            },
            # Under test the standby replicates the test database: no database of its own.
            "TEST": {"MIRROR": "default"},
        }
    DATABASE_ROUTERS = ["buzzrelay.db_router.PrimaryRouter"]
else:
    # No database configured: anything that touches it fails with ImproperlyConfigured; the
    # entry points say so first (`buzz-admin serve` refuses to start, bin/quickstart embeds one).
    DATABASES = {}

if CONFIG.redis_url:
    # Redis being down must not take the relay down: rate limits and replay claims have their
    # own fallbacks, so fail fast instead of hanging requests.
    CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": CONFIG.redis_url,
            "OPTIONS": {
                "SOCKET_CONNECT_TIMEOUT": REDIS_TIMEOUT_SECONDS,
                "SOCKET_TIMEOUT": REDIS_TIMEOUT_SECONDS,
                **sentinel_cache_options(CONFIG.redis_sentinels),
            },
        }
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [channel_layer_host(CONFIG.redis_url, CONFIG.redis_sentinels)]},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# How far the standby may lag before its reads go to the primary (artifacts.selectors.standby).
RELAY_REPLICA_MAX_LAG_MS = CONFIG.replica_max_lag_ms
RELAY_SIGNING_SECRET = CONFIG.relay_secret
RELAY_PUBKEY = CONFIG.relay_pubkey
RELAY_KEY_GENERATED = CONFIG.relay_key_generated
RELAY_PREVIOUS_SIGNING_SECRETS = CONFIG.previous_relay_secrets
RELAY_PUBLIC_URL = CONFIG.public_url
RELAY_TRUSTED_PROXIES = CONFIG.trusted_proxies
ARTIFACT_SYNC_OVERLAP_SECONDS = CONFIG.overlap_seconds
ARTIFACT_SYNC_TOKEN_MAX_AGE = CONFIG.token_max_age_seconds
# Enforced while the body is read, before any application code sees it (relaycore.body_limit).
RELAY_MAX_BODY_BYTES = 64 * 1024
RELAY_BODY_TIMEOUT_SECONDS = CONFIG.body_timeout_seconds
# The relay's API views (/query, /event, NIP-11) served on the event loop by the front door
# (relaycore.edge.front_door); off, the same views through Django's handler and middleware.
RELAY_FRONT_DOOR = CONFIG.front_door
# Writes on the server loop share transactions (artifacts.services.group_commit).
RELAY_GROUP_COMMIT = CONFIG.group_commit
# Token buckets (PROTOCOL.md section 3): per client address before any signature is verified,
# per pubkey after authentication; rate in requests per second, 0 turns a limit off.
RELAY_RATE_LIMIT_ADDRESS_RATE = CONFIG.rate_limits.address_rate
RELAY_RATE_LIMIT_ADDRESS_BURST = CONFIG.rate_limits.address_burst
RELAY_RATE_LIMIT_PUBKEY_RATE = CONFIG.rate_limits.pubkey_rate
RELAY_RATE_LIMIT_PUBKEY_BURST = CONFIG.rate_limits.pubkey_burst
# GET /metrics: a bearer token (METRICS_TOKEN) or a client in METRICS_ALLOWED_NETWORKS; with
# neither configured, loopback clients only (relayinfo/views.py).
RELAY_METRICS_TOKEN = CONFIG.metrics_token
RELAY_METRICS_NETWORKS = CONFIG.metrics_networks
# NIP-11 fields of the communities that leave theirs blank (RELAY_INFO_*; relayinfo/nip11.py).
RELAY_INFO_DEFAULTS = CONFIG.relay_info
RELAY_NAME = RELAY_INFO_DEFAULTS.name
RELAY_DESCRIPTION = RELAY_INFO_DEFAULTS.description
RELAY_SOFTWARE_URL = "https://github.com/block/buzz"

DATA_UPLOAD_MAX_MEMORY_SIZE = RELAY_MAX_BODY_BYTES
CSRF_FAILURE_VIEW = "buzzrelay.error_views.csrf_failure"

# NIP-11 `limitation` (PROTOCOL.md section 6). Each value is read both by relayinfo/nip11.py and
# by the code that enforces it, so what the relay announces is what it enforces.
# Events (writers over HTTP and WebSocket): size, tag count, tag value size, created_at window.
RELAY_EVENT_LIMITS = EventLimits(
    max_event_bytes=64 * 1024,
    max_tags=256,  # limitation.max_event_tags
    max_tag_value_bytes=4096,
    created_at_lower=365 * 86400,  # limitation.created_at_lower_limit
    created_at_upper=15 * 60,  # limitation.created_at_upper_limit
)
RELAY_MAX_MESSAGE_LENGTH = 131072  # WebSocket frame bytes; larger closes the connection
RELAY_MAX_SUBSCRIPTIONS = 64  # open REQs per WebSocket connection
RELAY_MAX_SUBID_LENGTH = 64  # characters of a REQ subscription id
RELAY_MAX_LIMIT = 1000  # largest `limit` of a /query filter or REQ
# The WebSocket at `/` serves NIP-01 REQ replay and live push (`artifacts.sync` in NIP-11).
RELAY_WEBSOCKET_SYNC = True

# Fleet registry (readiness item 4): each serving process refreshes its row this often; a row not
# refreshed for three intervals is stale, no longer counts, and is deleted.
RELAY_FLEET_REFRESH_SECONDS = 10
# The readiness verdict is cached per process this long (NIP-11 and rounds ask for it often).
RELAY_READINESS_CACHE_SECONDS = 2

# The HTTP edge is DRF's (relaycore/edge): NIP-98 authentication, the limits as throttles,
# orjson renderers, one exception handler. The views name their classes; these are the defaults.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["relaycore.edge.nip98.Nip98Authentication"],
    "DEFAULT_PERMISSION_CLASSES": [],
    "DEFAULT_THROTTLE_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_RENDERER_CLASSES": ["relaycore.edge.renderers.JSONBytesRenderer"],
    "DEFAULT_PARSER_CLASSES": ["relaycore.edge.parsers.BoundedBytesParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "relaycore.edge.renderers.OnlyRenderer",
    "EXCEPTION_HANDLER": "relaycore.edge.exceptions.relay_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

# GET /openapi.json: generated by drf-spectacular from the views (relaycore/edge/openapi.py);
# Swagger UI for staff at /admin/api/ from drf-spectacular-sidecar's static files (no CDN).
SPECTACULAR_SETTINGS = {
    "TITLE": "Buzz relay HTTP API",
    "DESCRIPTION": (
        "The HTTP half of the Buzz relay's wire contract (PROTOCOL.md): writes over"
        " `POST /event`, artifact reads over `POST /query` (plain and incremental),"
        " NIP-11 and health. Errors are `{\"error\": \"<code>\", \"message\": \"...\"}`;"
        " checks apply in the order 413, 404, 401, 400, 429, 503."
    ),
    "VERSION": RELAY_VERSION,
    "OAS_VERSION": "3.1.0",
    "DEFAULT_GENERATOR_CLASS": "relaycore.edge.openapi.RelaySchemaGenerator",
    # The relay has no serializers: its bodies and headers are components written by hand.
    "POSTPROCESSING_HOOKS": ["buzzrelay.openapi_document.relay_components"],
    "SCHEMA_PATH_PREFIX": "",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

AUTH_PASSWORD_VALIDATORS: list[dict[str, str]] = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "/static/"
# The task board at /app/ (buzzrelay/app_page.py; its assets are buzzrelay/static/buzz-app/).
RELAY_APP_ENABLED = CONFIG.app_enabled
# Collected by `buzz-admin serve` (and the quickstart, and the test suite) before serving, when
# the relay's static files changed (buzzrelay.static_files); served by WhiteNoise's index.
STATIC_ROOT = Path(CONFIG.static_root) if CONFIG.static_root else BASE_DIR / ".data" / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Hashed names (`base.<hash>.css`, cached for a year by browsers and proxies) from a manifest,
    # plus gzip copies that WhiteNoise sends to clients that accept them.
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Staff console (/admin/): what makes it safe to expose (docs/operations.md, "The staff
# console"). The public scheme is RELAY_PUBLIC_URL's: https makes the cookies Secure, names the
# origin CSRF checks accept, and allows HSTS.
_CONSOLE = CONFIG.console
_HTTPS = (CONFIG.public_url or "").startswith("https://")
# buzzrelay.console.ConsoleMiddleware sets this META key on every request from the relay's own
# rules (RELAY_PUBLIC_URL, then X-Forwarded-Proto from RELAY_TRUSTED_PROXIES only), after
# removing whatever a client sent under that name: request.is_secure() follows those rules.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_BUZZ_PUBLIC_SCHEME", "https")
SESSION_COOKIE_SECURE = _HTTPS
CSRF_COOKIE_SECURE = _HTTPS
SESSION_COOKIE_HTTPONLY = True
# The admin's forms carry the token in the page; no script needs to read the cookie.
CSRF_COOKIE_HTTPONLY = True
# Lax: a link into the console (from a chat, an alert) still arrives signed in; cross-site POSTs
# carry no cookie.
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
CSRF_TRUSTED_ORIGINS = [CONFIG.public_url] if CONFIG.public_url else []
# Idle expiry: every request pushes the end of the session ADMIN_SESSION_IDLE_MINUTES ahead
# (only sessions that exist are saved: the relay's API requests carry none).
SESSION_COOKIE_AGE = _CONSOLE.session_idle_seconds
SESSION_SAVE_EVERY_REQUEST = True
# HSTS only when asked (RELAY_HSTS_SECONDS): once a browser has seen it, it refuses plain http to
# this host for max-age, so a certificate problem locks every user out until it is fixed.
SECURE_HSTS_SECONDS = _CONSOLE.hsts_seconds
SILENCED_SYSTEM_CHECKS = [
    # SECURE_SSL_REDIRECT: the proxy redirects http to https (deploy/nginx/buzz.conf, port 80);
    # the relay itself listens on plain http behind it, and its health checks use that.
    "security.W008",
    # HSTS for subdomains and preloading: the relay sets it for its own host only; other
    # services under the same domain are not the relay's to pin (set it at the proxy).
    "security.W005",
    "security.W021",
]
if not SECURE_HSTS_SECONDS:
    # HSTS off is the default on purpose (above); RELAY_HSTS_SECONDS turns it on.
    SILENCED_SYSTEM_CHECKS.append("security.W004")

AUTHENTICATION_BACKENDS = [
    # First: refuses a locked-out account or address before the password is checked.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Failed sign-ins counted per account and, separately, per client address (either reaching the
# limit locks), in PostgreSQL so every worker and instance shares them; the client address is
# the relay's one rule (RELAY_TRUSTED_PROXIES).
AXES_FAILURE_LIMIT = _CONSOLE.login_failure_limit
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_COOLOFF_TIME = (
    timedelta(seconds=_CONSOLE.login_lockout_seconds) if _CONSOLE.login_lockout_seconds else None
)
AXES_CLIENT_IP_CALLABLE = "buzzrelay.console.client_ip"
AXES_LOCKOUT_CALLABLE = "relayinfo.staff.lockout_response"
AXES_RESET_ON_SUCCESS = True
# The relay logs one line per refusal itself (relayinfo.staff); axes' own lines stay at WARNING.
AXES_VERBOSE = False
# ADMIN_REQUIRE_2FA: staff pages need a session verified by TOTP or a recovery code.
ADMIN_REQUIRE_2FA = _CONSOLE.require_2fa
ADMIN_ALLOWED_NETWORKS = _CONSOLE.allowed_networks
OTP_TOTP_ISSUER = "Buzz relay"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"without_traceback": {"()": "buzzrelay.logfilters.WithoutTraceback"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "console_one_line": {
            "class": "logging.StreamHandler", "formatter": "plain",
            "filters": ["without_traceback"],
        },
    },
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "buzzrelay": {"level": "INFO"},
        "artifacts": {"level": "INFO"},
        # SuspiciousOperation (a malformed Host, a refused body) is the client's mistake: one
        # line each, answered as JSON 400 by buzzrelay.error_views.
        "django.security": {
            "handlers": ["console_one_line"], "level": "WARNING", "propagate": False,
        },
        # django-axes logs two lines per failed sign-in with the account masked; the relay's own
        # line (relayinfo.staff, logger buzzrelay.console) names account and client once.
        "axes": {"level": "ERROR"},
    },
}
