"""The relay's configuration, read from the environment once and validated.

Every entry point (manage.py, buzz-admin, the ASGI application) calls `load_config()` before
Django configures itself, so a bad value stops the process with one clear line instead of a
traceback from deep inside Django. Library code never reads the environment: it reads
`django.conf.settings`, which settings.py fills from this object.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass, field, fields
from functools import cache
from ipaddress import ip_network
from pathlib import Path
from urllib.parse import unquote, urlsplit

from nostr.schnorr import is_valid_secret, pubkey_from_secret
from relaycore.redis_topology import Sentinels


class ConfigError(Exception):
    """A configuration value is missing or wrong; the message is one line for the operator."""


@dataclass(frozen=True)
class DatabaseConfig:
    name: str
    user: str
    password: str
    host: str
    port: str
    options: dict[str, str] = field(default_factory=dict)

    def django_settings(self) -> dict[str, object]:
        """This URL as a Django `DATABASES` entry (settings.py adds the relay's own options and
        pooling; `relaycore.db.psycopg_connect_kwargs` turns an entry into libpq arguments)."""
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": self.name,
            "USER": self.user,
            "PASSWORD": self.password,
            "HOST": self.host,
            "PORT": self.port,
            "OPTIONS": dict(self.options),
        }


@dataclass(frozen=True)
class Config:
    database: DatabaseConfig | None
    database_url: str | None
    redis_url: str | None
    relay_secret: str
    relay_pubkey: str
    relay_key_generated: bool
    previous_relay_secrets: tuple[str, ...]
    public_url: str | None
    trusted_proxies: tuple[str, ...]
    secret_key: str
    debug: bool
    overlap_seconds: int
    database_pool_size: int
    # Server-side prepared statements for the reads' hot statements (off behind a transaction-mode
    # pooler that does not track them).
    database_prepared_statements: bool
    # The relay's DRF views served by the front door (relaycore.edge.front_door); off, through
    # Django's ASGI handler and middleware (same views, same answers, slower).
    front_door: bool
    # Writes on the server loop share transactions (artifacts.services.group_commit); off, each
    # write is a transaction of its own, on a connection of its own.
    group_commit: bool
    token_max_age_seconds: int
    # DATABASE_REPLICA_URL: a hot standby that may serve plain reads, history and WebSocket
    # replay (artifacts.selectors.standby), while it lags the primary by at most this much.
    replica: DatabaseConfig | None = None
    replica_max_lag_ms: int = 1000
    # Seconds a client has to send its whole request body (a slow body is answered 408).
    body_timeout_seconds: int = 10
    rate_limits: RateLimits = field(default_factory=lambda: RateLimits())
    # Where `collectstatic` puts the staff pages' files and the server serves them from
    # (buzzrelay.static_files); None: `.data/static` in the checkout.
    static_root: str | None = None
    relay_info: RelayInfoDefaults = field(default_factory=lambda: RelayInfoDefaults())
    # Who may read /metrics: a bearer token, and/or client networks; neither set: loopback only.
    metrics_token: str | None = None
    metrics_networks: tuple[str, ...] = ()
    # What stands between the relay and PostgreSQL (DATABASE_POOLER): "" nothing, "session" or
    # "transaction" (PgBouncer's pool_mode). Transaction pooling gives a client's statements no
    # session of their own: no session settings, session advisory locks or prepared statements.
    database_pooler: str = ""
    # DATABASE_DIRECT_URL: PostgreSQL itself, for the work that needs a session (migrations and
    # index builds under the schema lock, readiness evaluation under session timeouts); required
    # with DATABASE_POOLER=transaction.
    database_direct: DatabaseConfig | None = None
    database_direct_url: str | None = None
    # REDIS_SENTINELS: (host, port) of each Redis Sentinel; REDIS_URL's host then names the
    # monitored master (redis://mymaster/0, django-redis' convention), found through them. Their
    # own credentials: REDIS_SENTINEL_PASSWORD[_FILE], or `[user]:password@` before the list.
    redis_sentinels: Sentinels = field(default_factory=Sentinels)
    # RELAY_APP: serve the task board built on buzz-sync-js at /app/ (on in the quickstart).
    app_enabled: bool = False
    # The staff console (/admin/): its sign-in limits, second factor, network and session.
    console: ConsoleConfig = field(default_factory=lambda: ConsoleConfig())


@dataclass(frozen=True)
class ConsoleConfig:
    """The staff console's exposure (docs/operations.md, "The staff console")."""

    # ADMIN_REQUIRE_2FA: staff pages need a session verified by a second factor (TOTP or a
    # recovery code); a staff user without one is sent to enrol after the password.
    require_2fa: bool = False
    # ADMIN_ALLOWED_NETWORKS: clients outside these networks get a 404 for /admin/ (empty: all).
    allowed_networks: tuple[str, ...] = ()
    # ADMIN_SESSION_IDLE_MINUTES: a staff session ends after this long without a request.
    session_idle_seconds: int = 30 * 60
    # ADMIN_LOGIN_FAILURE_LIMIT failed sign-ins lock the account and, separately, the client
    # address; ADMIN_LOGIN_LOCKOUT_MINUTES later they unlock themselves (0: only by staff).
    login_failure_limit: int = 10
    login_lockout_seconds: int = 60 * 60
    # RELAY_HSTS_SECONDS: Strict-Transport-Security max-age (0: not sent); needs an https
    # RELAY_PUBLIC_URL.
    hsts_seconds: int = 0


@dataclass(frozen=True)
class RelayInfoDefaults:
    """The NIP-11 fields of every community that leaves them blank (RELAY_INFO_<FIELD>): the
    document names the community's own value, else this one, else leaves the field out."""

    name: str = "Buzz relay"
    description: str = "Team workspace artifacts: tasks, notes and documents."
    contact: str | None = None
    icon: str | None = None
    banner: str | None = None
    terms_of_service: str | None = None
    privacy_policy: str | None = None
    posting_policy: str | None = None
    # limitation.max_content_length: the most characters an event's content may have.
    max_content_length: int | None = None


# NIP-11 fields that are URLs; `contact` may be any URI or an address, so it is only bounded.
INFO_URL_FIELDS = ("icon", "banner", "terms_of_service", "privacy_policy", "posting_policy")
INFO_MAX_CHARS = 500


def info_value_problem(field_name: str, value: str) -> str | None:
    """Why `value` cannot be the NIP-11 `field_name` (None: it can). One rule for the
    environment's defaults, `buzz-admin community` and the admin."""
    if field_name == "description":
        return None
    if len(value) > INFO_MAX_CHARS:
        return f"must be at most {INFO_MAX_CHARS} characters"
    if field_name in INFO_URL_FIELDS:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname or " " in value:
            return "must be an http:// or https:// URL"
    return None


@dataclass(frozen=True)
class RateLimits:
    """Token buckets (requests per second, burst) per client address and per pubkey; rate 0 = off.

    The address limit is checked before any signature is verified and must allow for many users
    behind one NAT; the pubkey limit bounds one identity. Benchmarks raise both through the
    environment (RELAY_RATE_LIMIT_ADDRESS_RATE=0 etc.).
    """

    address_rate: float = 200.0
    address_burst: int = 1000
    pubkey_rate: float = 50.0
    pubkey_burst: int = 200


def _env(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else None


def _secret(name: str) -> str | None:
    """`NAME` or the contents of the file named by `NAME_FILE` (Docker/Kubernetes secrets)."""
    direct, path = _env(name), _env(f"{name}_FILE")
    if direct and path:
        raise ConfigError(f"set {name} or {name}_FILE, not both")
    if path:
        try:
            return Path(path).read_text().strip() or None
        except OSError as exc:
            raise ConfigError(f"{name}_FILE={path}: cannot read ({exc.strerror})") from None
    return direct


def parse_database_url(url: str, name: str = "DATABASE_URL") -> DatabaseConfig:
    """A libpq URL as Django settings; several hosts (`postgres://u@a:5432,b:5432/db`, libpq's
    multi-host form, for a failover with `target_session_attrs=read-write`) become comma
    lists in HOST and PORT, which Django hands to libpq unchanged."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ConfigError(
            f"{name} must look like postgres://user:password@host:5432/dbname "
            f"(got scheme {parts.scheme or 'none'!r})"
        )
    database = unquote(parts.path.lstrip("/"))
    if not database:
        raise ConfigError(f"{name} names no database (postgres://user@host:5432/dbname)")
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    hosts, ports = _host_list(hostlist, name)
    options: dict[str, str] = {}
    for pair in filter(None, parts.query.split("&")):
        key, _, value = pair.partition("=")
        options[unquote(key)] = unquote(value)
    return DatabaseConfig(
        name=database,
        user=unquote(user or "postgres"),
        password=unquote(password),
        host=hosts or options.pop("host", ""),
        port=ports or options.pop("port", ""),
        options=options,
    )


def _host_list(hostlist: str, name: str) -> tuple[str, str]:
    """("a,b", "5432,5433") from "a:5432,b:5433"; ports may be left out (libpq's default)."""
    hosts, ports = [], []
    for entry in hostlist.split(","):
        host, port = entry, ""
        if entry.startswith("["):  # [::1]:5432
            host, _, rest = entry[1:].partition("]")
            port = rest.removeprefix(":")
        elif entry.count(":") == 1:
            host, _, port = entry.partition(":")
        if port and not port.isdigit():
            raise ConfigError(f"{name} has a port that is not a number")
        hosts.append(unquote(host))
        ports.append(port)
    if not any(hosts):
        return "", ""
    if len(hosts) > 1 and any(ports) and not all(ports):
        raise ConfigError(f"{name} lists several hosts: give each its port, or none")
    return ",".join(hosts), ",".join(ports) if any(ports) else ""


def _int(name: str, default: int, *, minimum: int, unit: str = "seconds") -> int:
    raw = _env(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number of {unit} (got {raw!r})") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum} (got {value})")
    return value


def _bool(name: str, default: bool) -> bool:
    raw = _env(name)
    if raw is None:
        return default
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false (got {raw!r})")


def _relay_secret(value: str, name: str) -> str:
    secret = value.strip().lower()
    if len(secret) != 64 or not is_valid_secret(secret):
        raise ConfigError(f"{name} must be a 64-character hex secp256k1 secret key")
    return secret


def _public_url(raw: str | None) -> str | None:
    if raw is None:
        return None
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise ConfigError(
            "RELAY_PUBLIC_URL must be a scheme and host like https://relay.example.com "
            f"(got {raw!r})"
        )
    return f"{parts.scheme}://{parts.netloc}".lower()


def _trusted_proxies(raw: str | None) -> tuple[str, ...]:
    return _networks("RELAY_TRUSTED_PROXIES", raw)


def _networks(name: str, raw: str | None) -> tuple[str, ...]:
    if raw is None:
        return ()
    networks = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        try:
            networks.append(str(ip_network(item, strict=False)))
        except ValueError:
            raise ConfigError(
                f"{name} must list IP addresses or networks (bad entry {item!r})"
            ) from None
    return tuple(networks)


def _console(public_url: str | None) -> ConsoleConfig:
    hsts_seconds = _int("RELAY_HSTS_SECONDS", 0, minimum=0)
    if hsts_seconds and not (public_url or "").startswith("https://"):
        raise ConfigError(
            "RELAY_HSTS_SECONDS needs RELAY_PUBLIC_URL=https://... (HSTS is only sent over https)"
        )
    return ConsoleConfig(
        require_2fa=_bool("ADMIN_REQUIRE_2FA", False),
        allowed_networks=_networks("ADMIN_ALLOWED_NETWORKS", _env("ADMIN_ALLOWED_NETWORKS")),
        session_idle_seconds=60 * _int("ADMIN_SESSION_IDLE_MINUTES", 30, minimum=1,
                                       unit="minutes"),
        login_failure_limit=_int("ADMIN_LOGIN_FAILURE_LIMIT", 10, minimum=1, unit="attempts"),
        login_lockout_seconds=60 * _int("ADMIN_LOGIN_LOCKOUT_MINUTES", 60, minimum=0,
                                        unit="minutes"),
        hsts_seconds=hsts_seconds,
    )


def _metrics_token() -> str | None:
    token = _secret("METRICS_TOKEN")
    if token is not None and (len(token) < 16 or any(c.isspace() for c in token)):
        raise ConfigError("METRICS_TOKEN must be at least 16 characters without spaces")
    return token


def _float(name: str, default: float, *, minimum: float) -> float:
    raw = _env(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number (got {raw!r})") from None
    if not value >= minimum or value == float("inf"):  # also refuses NaN
        raise ConfigError(f"{name} must be a finite number of at least {minimum} (got {raw!r})")
    return value


def _burst(name: str, default: int) -> int:
    raw = _env(name)
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{name} must be a whole number of requests, at least 1 (got {raw!r})")
    return int(raw)


def _rate_limits() -> RateLimits:
    default = RateLimits()
    return RateLimits(
        address_rate=_float("RELAY_RATE_LIMIT_ADDRESS_RATE", default.address_rate, minimum=0),
        address_burst=_burst("RELAY_RATE_LIMIT_ADDRESS_BURST", default.address_burst),
        pubkey_rate=_float("RELAY_RATE_LIMIT_PUBKEY_RATE", default.pubkey_rate, minimum=0),
        pubkey_burst=_burst("RELAY_RATE_LIMIT_PUBKEY_BURST", default.pubkey_burst),
    )


def _relay_info() -> RelayInfoDefaults:
    values: dict[str, str | int] = {}
    for info_field in fields(RelayInfoDefaults):
        name = f"RELAY_INFO_{info_field.name.upper()}"
        raw = _env(name)
        if raw is None:
            continue
        if info_field.name == "max_content_length":
            values[info_field.name] = _int(name, 0, minimum=1, unit="characters")
            continue
        problem = info_value_problem(info_field.name, raw.strip())
        if problem:
            raise ConfigError(f"{name} {problem} (got {raw!r})")
        values[info_field.name] = raw.strip()
    return RelayInfoDefaults(**values)  # type: ignore[arg-type]


def _static_root(raw: str | None) -> str | None:
    if raw is None:
        return None
    if not Path(raw).is_absolute():
        raise ConfigError(f"STATIC_ROOT must be an absolute path (got {raw!r})")
    return raw


POOLER_MODES = ("", "session", "transaction")


def _database_pooler(database: DatabaseConfig | None) -> tuple[str, DatabaseConfig | None]:
    """DATABASE_POOLER and DATABASE_DIRECT_URL, checked together."""
    pooler = (_env("DATABASE_POOLER") or "").strip().lower()
    if pooler in ("none", "off"):
        pooler = ""
    if pooler not in POOLER_MODES:
        raise ConfigError(
            f"DATABASE_POOLER must be session or transaction, or unset (got {pooler!r})"
        )
    direct_url = _env("DATABASE_DIRECT_URL")
    direct = parse_database_url(direct_url, "DATABASE_DIRECT_URL") if direct_url else None
    if pooler == "transaction" and database is not None and direct is None:
        raise ConfigError(
            "DATABASE_POOLER=transaction needs DATABASE_DIRECT_URL: PostgreSQL itself, not the"
            " pooler, for what needs a session of its own (buzz-admin migrate and build-indexes"
            " hold the schema's advisory lock; readiness runs under session timeouts)"
        )
    return pooler, direct


def _redis_sentinels(redis_url: str | None) -> Sentinels:
    """REDIS_SENTINELS (`[[user]:password@]host:port,host:port...`, the credentials written
    once, URL-encoded, for every sentinel) and REDIS_SENTINEL_PASSWORD[_FILE]."""
    raw = _env("REDIS_SENTINELS")
    password = _secret("REDIS_SENTINEL_PASSWORD")
    if raw is None:
        if password is not None:
            raise ConfigError("REDIS_SENTINEL_PASSWORD needs REDIS_SENTINELS")
        return Sentinels()
    if redis_url is None or urlsplit(redis_url).scheme not in ("redis", "rediss") or not (
        urlsplit(redis_url).hostname
    ):
        raise ConfigError(
            "REDIS_SENTINELS needs REDIS_URL=redis://<master name>/<db> (its host part names"
            " the master the sentinels monitor)"
        )
    # The credentials end at the last "@" before the addresses (a password may hold one only
    # URL-encoded, as in any URL).
    credentials, at, addresses = raw.rpartition("@")
    username = None
    if at:
        user, colon, in_url = credentials.partition(":")
        if not colon:
            raise ConfigError(
                "REDIS_SENTINELS takes the sentinels' credentials as [user]:password@ before"
                " the addresses (a URL's form)"
            )
        if password is not None:
            raise ConfigError(
                "set the sentinels' password in REDIS_SENTINEL_PASSWORD or in REDIS_SENTINELS,"
                " not both"
            )
        username, password = unquote(user) or None, unquote(in_url) or None
    sentinels = []
    for entry in addresses.split(","):
        host, _, port = entry.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                "REDIS_SENTINELS must be [[user]:password@]host:port[,host:port...]"
                f" (got {entry.strip()!r})"
            )
        sentinels.append((host.strip("[]"), int(port)))
    return Sentinels(addresses=tuple(sentinels), username=username, password=password)


def read_config() -> Config:
    database_url = _env("DATABASE_URL")
    database = parse_database_url(database_url) if database_url else None
    database_pooler, database_direct = _database_pooler(database)
    replica_url = _env("DATABASE_REPLICA_URL")
    replica = parse_database_url(replica_url, name="DATABASE_REPLICA_URL") if replica_url else None
    if replica is not None and database is None:
        raise ConfigError("DATABASE_REPLICA_URL needs DATABASE_URL (the primary) as well")
    redis_url = _env("REDIS_URL")
    if redis_url and urlsplit(redis_url).scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(
            f"REDIS_URL must start with redis://, rediss:// or unix:// (got {redis_url!r})"
        )
    redis_sentinels = _redis_sentinels(redis_url)

    configured = _secret("RELAY_SIGNING_KEY")
    # Without a configured key the relay still serves, but its tokens die with the process and
    # readiness item 5 fails, so incremental reads are never advertised.
    relay_secret = (
        _relay_secret(configured, "RELAY_SIGNING_KEY") if configured else secrets.token_hex(32)
    )
    previous = tuple(
        _relay_secret(part, "RELAY_PREVIOUS_SIGNING_KEYS (each entry)")
        for part in (_env("RELAY_PREVIOUS_SIGNING_KEYS") or "").split(",")
        if part.strip()
    )
    debug = _bool("DEBUG", False)
    secret_key = _secret("SECRET_KEY")
    if secret_key is None:
        if not debug and database is not None and configured is not None:
            # Staff sessions must survive restarts and agree across instances: derive the key
            # from the relay secret (one-way), which every instance shares.
            secret_key = hashlib.sha256(
                b"buzz django SECRET_KEY\0" + bytes.fromhex(relay_secret)
            ).hexdigest()
        else:
            secret_key = "buzz-dev-" + secrets.token_hex(32)
    public_url = _public_url(_env("RELAY_PUBLIC_URL"))
    return Config(
        database=database,
        database_url=database_url,
        redis_url=redis_url,
        relay_secret=relay_secret,
        relay_pubkey=pubkey_from_secret(relay_secret),
        relay_key_generated=configured is None,
        previous_relay_secrets=previous,
        public_url=public_url,
        trusted_proxies=_trusted_proxies(_env("RELAY_TRUSTED_PROXIES")),
        secret_key=secret_key,
        debug=debug,
        overlap_seconds=_int("ARTIFACT_SYNC_OVERLAP_SECONDS", 120, minimum=0),
        database_pool_size=_int("DATABASE_POOL_SIZE", 16, minimum=1, unit="connections"),
        # PgBouncer < 1.21 (Debian 12 ships 1.18) does not track prepared statements across
        # transaction-pooled connections; 1.21+ with max_prepared_statements does: set true.
        database_prepared_statements=_bool(
            "DATABASE_PREPARED_STATEMENTS", database_pooler != "transaction"
        ),
        database_pooler=database_pooler,
        database_direct=database_direct,
        database_direct_url=_env("DATABASE_DIRECT_URL"),
        redis_sentinels=redis_sentinels,
        front_door=_bool("RELAY_FRONT_DOOR", True),
        group_commit=_bool("RELAY_GROUP_COMMIT", True),
        token_max_age_seconds=_int("ARTIFACT_SYNC_TOKEN_MAX_AGE", 30 * 86400, minimum=60),
        replica=replica,
        replica_max_lag_ms=_int(
            "DATABASE_REPLICA_MAX_LAG_MS", 1000, minimum=0, unit="milliseconds"
        ),
        body_timeout_seconds=_int("RELAY_BODY_TIMEOUT_SECONDS", 10, minimum=1),
        rate_limits=_rate_limits(),
        static_root=_static_root(_env("STATIC_ROOT")),
        relay_info=_relay_info(),
        metrics_token=_metrics_token(),
        metrics_networks=_networks("METRICS_ALLOWED_NETWORKS", _env("METRICS_ALLOWED_NETWORKS")),
        app_enabled=_bool("RELAY_APP", False),
        console=_console(public_url),
    )


@cache
def load_config() -> Config:
    return read_config()
