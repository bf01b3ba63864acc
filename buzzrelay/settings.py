"""Django settings, filled from the validated environment (buzzrelay.config)."""

from __future__ import annotations

from pathlib import Path

from buzzrelay import VERSION
from buzzrelay.config import load_config

BASE_DIR = Path(__file__).resolve().parent.parent
CONFIG = load_config()

SECRET_KEY = CONFIG.secret_key
DEBUG = CONFIG.debug
# Hosts are checked by the community lookup (unknown host: a JSON 404 from the relay), so
# Django's own Host validation, which answers with an HTML 400, stays out of the way.
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "channels",
    "artifacts",
    "relayinfo",
]

MIDDLEWARE = [
    "buzzrelay.middleware.RelayHttpMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "buzzrelay.urls"
ASGI_APPLICATION = "buzzrelay.asgi.application"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": _db.name,
            "USER": _db.user,
            "PASSWORD": _db.password,
            "HOST": _db.host,
            "PORT": _db.port,
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": {
                **_db.options,
                "application_name": RELAY_APPLICATION_NAME,
                "connect_timeout": 5,
            },
            "TEST": {"NAME": f"test_{_db.name}"},
        }
    }
else:
    # No database configured: anything that touches it fails with ImproperlyConfigured; the
    # entry points say so first (`buzz-admin serve` refuses to start, bin/quickstart embeds one).
    DATABASES = {}

if CONFIG.redis_url:
    CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": CONFIG.redis_url,
            "OPTIONS": {
                # Redis being down must not take the relay down: rate limits and replay claims
                # have their own fallbacks, so fail fast instead of hanging requests.
                "SOCKET_CONNECT_TIMEOUT": 0.5,
                "SOCKET_TIMEOUT": 0.5,
            },
        }
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [CONFIG.redis_url]},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

RELAY_SIGNING_SECRET = CONFIG.relay_secret
RELAY_PUBKEY = CONFIG.relay_pubkey
RELAY_KEY_GENERATED = CONFIG.relay_key_generated
RELAY_PREVIOUS_SIGNING_SECRETS = CONFIG.previous_relay_secrets
RELAY_PUBLIC_URL = CONFIG.public_url
RELAY_TRUSTED_PROXIES = CONFIG.trusted_proxies
ARTIFACT_SYNC_OVERLAP_SECONDS = CONFIG.overlap_seconds
ARTIFACT_SYNC_TOKEN_MAX_AGE = CONFIG.token_max_age_seconds
RELAY_MAX_BODY_BYTES = 64 * 1024
# Token buckets (PROTOCOL.md section 3): per client address before any signature is verified,
# per pubkey after authentication; rate in requests per second, 0 turns a limit off.
RELAY_RATE_LIMIT_ADDRESS_RATE = CONFIG.rate_limits.address_rate
RELAY_RATE_LIMIT_ADDRESS_BURST = CONFIG.rate_limits.address_burst
RELAY_RATE_LIMIT_PUBKEY_RATE = CONFIG.rate_limits.pubkey_rate
RELAY_RATE_LIMIT_PUBKEY_BURST = CONFIG.rate_limits.pubkey_burst
RELAY_NAME = "Buzz relay"
RELAY_DESCRIPTION = "Team workspace artifacts: tasks, notes and documents."
RELAY_SOFTWARE_URL = "https://github.com/block/buzz"

DATA_UPLOAD_MAX_MEMORY_SIZE = RELAY_MAX_BODY_BYTES

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
}

AUTH_PASSWORD_VALIDATORS: list[dict[str, str]] = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / ".data" / "static"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
SESSION_COOKIE_HTTPONLY = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {"buzzrelay": {"level": "INFO"}, "artifacts": {"level": "INFO"}},
}
