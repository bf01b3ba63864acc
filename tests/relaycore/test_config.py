"""Settings from the environment (relaycore.config): every value validated, one-line errors."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nostr.schnorr import pubkey_from_secret
from relaycore.config import ConfigError, parse_database_url, read_config

KEY = "5f1b6c6e2d4a7b3c9e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5"
OTHER_KEY = "1" * 64
# secp256k1's group order n: a secret must be in [1, n - 1].
ORDER = "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141"

VARIABLES = [
    "DATABASE_URL", "REDIS_URL", "RELAY_SIGNING_KEY", "RELAY_SIGNING_KEY_FILE",
    "RELAY_PREVIOUS_SIGNING_KEYS", "RELAY_PUBLIC_URL", "RELAY_TRUSTED_PROXIES", "SECRET_KEY",
    "SECRET_KEY_FILE", "DEBUG", "ARTIFACT_SYNC_OVERLAP_SECONDS", "ARTIFACT_SYNC_TOKEN_MAX_AGE",
    "DATABASE_POOLER", "DATABASE_DIRECT_URL", "DATABASE_PREPARED_STATEMENTS", "REDIS_SENTINELS",
    "DATABASE_REPLICA_URL", "DATABASE_REPLICA_MAX_LAG_MS",
    "ADMIN_REQUIRE_2FA", "ADMIN_ALLOWED_NETWORKS", "ADMIN_SESSION_IDLE_MINUTES",
    "ADMIN_LOGIN_FAILURE_LIMIT", "ADMIN_LOGIN_LOCKOUT_MINUTES", "RELAY_HSTS_SECONDS",
]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DATABASE_URL", "postgres://relay:pw@db.internal:5433/buzz")
    monkeypatch.setenv("RELAY_SIGNING_KEY", KEY)
    return monkeypatch


def error_of(monkeypatch: pytest.MonkeyPatch, **values: str) -> str:
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        read_config()
    message = str(caught.value)
    assert "\n" not in message  # one line for the operator
    return message


def test_defaults_of_a_minimal_production_environment() -> None:
    config = read_config()
    assert config.database is not None
    assert (config.database.name, config.database.user, config.database.password,
            config.database.host, config.database.port) == ("buzz", "relay", "pw",
                                                             "db.internal", "5433")
    assert config.relay_secret == KEY and config.relay_pubkey == pubkey_from_secret(KEY)
    assert config.relay_key_generated is False
    assert config.redis_url is None and config.public_url is None
    assert config.trusted_proxies == () and config.previous_relay_secrets == ()
    assert config.debug is False
    assert config.overlap_seconds == 120
    assert config.token_max_age_seconds == 30 * 86400


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("not-hex", "RELAY_SIGNING_KEY must be a 64-character hex secp256k1 secret key"),
        ("ab" * 31, "RELAY_SIGNING_KEY must be a 64-character hex secp256k1 secret key"),
        ("0" * 64, "RELAY_SIGNING_KEY must be a 64-character hex secp256k1 secret key"),
        (ORDER, "RELAY_SIGNING_KEY must be a 64-character hex secp256k1 secret key"),
        ("g" + KEY[1:], "RELAY_SIGNING_KEY must be a 64-character hex secp256k1 secret key"),
    ],
)
def test_a_bad_relay_key_is_refused(
    clean_environment: pytest.MonkeyPatch, value: str, expected: str
) -> None:
    assert error_of(clean_environment, RELAY_SIGNING_KEY=value) == expected


def test_relay_key_is_normalised_and_read_from_a_file(
    clean_environment: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_environment.setenv("RELAY_SIGNING_KEY", f"  {KEY.upper()}\n")
    assert read_config().relay_secret == KEY
    clean_environment.delenv("RELAY_SIGNING_KEY")
    key_file = tmp_path / "relay.key"
    key_file.write_text(KEY + "\n")
    clean_environment.setenv("RELAY_SIGNING_KEY_FILE", str(key_file))
    config = read_config()
    assert config.relay_secret == KEY and config.relay_key_generated is False


def test_key_and_key_file_together_or_an_unreadable_file_are_refused(
    clean_environment: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "nope.key"
    assert error_of(clean_environment, RELAY_SIGNING_KEY_FILE=str(missing)) == (
        "set RELAY_SIGNING_KEY or RELAY_SIGNING_KEY_FILE, not both"
    )
    clean_environment.delenv("RELAY_SIGNING_KEY")
    message = error_of(clean_environment)
    assert message.startswith(f"RELAY_SIGNING_KEY_FILE={missing}: cannot read")


def test_without_a_key_one_is_generated_and_flagged(clean_environment: pytest.MonkeyPatch) -> None:
    clean_environment.delenv("RELAY_SIGNING_KEY")
    first, second = read_config(), read_config()
    assert first.relay_key_generated and second.relay_key_generated
    assert first.relay_secret != second.relay_secret  # never stable: readiness item 5 fails


def test_previous_keys_are_listed_and_each_is_checked(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    clean_environment.setenv("RELAY_PREVIOUS_SIGNING_KEYS", f"{OTHER_KEY}, {KEY.upper()} ,")
    assert read_config().previous_relay_secrets == (OTHER_KEY, KEY)
    assert error_of(clean_environment, RELAY_PREVIOUS_SIGNING_KEYS=f"{OTHER_KEY},zz") == (
        "RELAY_PREVIOUS_SIGNING_KEYS (each entry) must be a 64-character hex secp256k1 secret key"
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mysql://u@h/db", "DATABASE_URL must look like postgres://user:password@host:5432/dbname"
                           " (got scheme 'mysql')"),
        ("relay@db.internal/buzz", "DATABASE_URL must look like "
                                  "postgres://user:password@host:5432/dbname (got scheme 'none')"),
        ("postgres://u@h:5432/", "DATABASE_URL names no database (postgres://user@host:5432/dbname)"),
        ("postgres://u@h:port/db", "DATABASE_URL has a port that is not a number"),
    ],
)
def test_a_bad_database_url_is_refused(
    clean_environment: pytest.MonkeyPatch, url: str, expected: str
) -> None:
    assert error_of(clean_environment, DATABASE_URL=url) == expected


def test_database_url_options_and_socket_host() -> None:
    parsed = parse_database_url(
        "postgresql://app%40corp:p%2Fw%3A@/buzz%2Dprod?host=/run/postgresql&sslmode=require"
    )
    assert (parsed.user, parsed.password, parsed.name) == ("app@corp", "p/w:", "buzz-prod")
    assert parsed.host == "/run/postgresql" and parsed.port == ""
    assert parsed.options == {"sslmode": "require"}


def test_a_multi_host_url_lists_hosts_and_ports_for_libpq() -> None:
    """libpq's failover form: Django hands HOST and PORT to libpq, which tries each in turn."""
    parsed = parse_database_url(
        "postgres://relay:pw@db-a:5432,db-b:5433/buzz?target_session_attrs=read-write"
    )
    assert (parsed.host, parsed.port) == ("db-a,db-b", "5432,5433")
    assert parsed.options == {"target_session_attrs": "read-write"}
    assert parse_database_url("postgres://u@a,b/db").host == "a,b"
    assert parse_database_url("postgres://u@[::1]:5432/db").host == "::1"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgres://u@a:5432,b/db",
         "DATABASE_URL lists several hosts: give each its port, or none"),
        ("postgres://u@a:5432,b:x/db", "DATABASE_URL has a port that is not a number"),
    ],
)
def test_a_bad_multi_host_url_is_refused(
    clean_environment: pytest.MonkeyPatch, url: str, expected: str
) -> None:
    assert error_of(clean_environment, DATABASE_URL=url) == expected


def test_replica_url_and_lag_bound(clean_environment: pytest.MonkeyPatch) -> None:
    clean_environment.setenv("DATABASE_REPLICA_URL", "postgres://relay@standby:5432/buzz")
    clean_environment.setenv("DATABASE_REPLICA_MAX_LAG_MS", "250")
    config = read_config()
    assert config.replica is not None and config.replica.host == "standby"
    assert config.replica_max_lag_ms == 250
    assert error_of(clean_environment, DATABASE_REPLICA_URL="mysql://x/y").startswith(
        "DATABASE_REPLICA_URL must look like postgres://")
    clean_environment.setenv("DATABASE_REPLICA_URL", "postgres://relay@standby:5432/buzz")
    assert error_of(clean_environment, DATABASE_REPLICA_MAX_LAG_MS="-1") == (
        "DATABASE_REPLICA_MAX_LAG_MS must be at least 0 (got -1)")
    clean_environment.delenv("DATABASE_URL")
    clean_environment.delenv("DATABASE_REPLICA_MAX_LAG_MS")
    assert error_of(clean_environment) == (
        "DATABASE_REPLICA_URL needs DATABASE_URL (the primary) as well")


_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1,
                max_size=20)


@given(user=_text, password=_text, name=_text, port=st.integers(1, 65535))
def test_database_url_components_survive_percent_encoding(
    user: str, password: str, name: str, port: int
) -> None:
    url = (f"postgres://{quote(user, safe='')}:{quote(password, safe='')}@db.example:{port}/"
           f"{quote(name, safe='')}")
    parsed = parse_database_url(url)
    assert (parsed.user, parsed.password, parsed.name, parsed.port) == (
        user, password, name, str(port))


def test_no_database_url_means_no_database(clean_environment: pytest.MonkeyPatch) -> None:
    clean_environment.delenv("DATABASE_URL")
    config = read_config()
    assert config.database is None and config.database_url is None


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("REDIS_URL", "http://cache:6379", "REDIS_URL must start with redis://, rediss:// or "
                                           "unix:// (got 'http://cache:6379')"),
        ("RELAY_PUBLIC_URL", "https://relay.example/path", "RELAY_PUBLIC_URL must be a scheme and "
         "host like https://relay.example.com (got 'https://relay.example/path')"),
        ("RELAY_PUBLIC_URL", "relay.example", "RELAY_PUBLIC_URL must be a scheme and host like "
         "https://relay.example.com (got 'relay.example')"),
        ("RELAY_TRUSTED_PROXIES", "10.0.0.0/8, proxy.local", "RELAY_TRUSTED_PROXIES must list IP "
         "addresses or networks (bad entry 'proxy.local')"),
        ("DEBUG", "maybe", "DEBUG must be true or false (got 'maybe')"),
        ("ARTIFACT_SYNC_OVERLAP_SECONDS", "2m", "ARTIFACT_SYNC_OVERLAP_SECONDS must be a whole "
         "number of seconds (got '2m')"),
        ("ARTIFACT_SYNC_OVERLAP_SECONDS", "-1", "ARTIFACT_SYNC_OVERLAP_SECONDS must be at least 0 "
         "(got -1)"),
        ("ARTIFACT_SYNC_TOKEN_MAX_AGE", "59", "ARTIFACT_SYNC_TOKEN_MAX_AGE must be at least 60 "
         "(got 59)"),
    ],
)
def test_other_bad_values_are_refused(
    clean_environment: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    assert error_of(clean_environment, **{name: value}) == expected


def test_good_optional_values(clean_environment: pytest.MonkeyPatch) -> None:
    clean_environment.setenv("REDIS_URL", "rediss://cache:6380/2")
    clean_environment.setenv("RELAY_PUBLIC_URL", "HTTPS://Relay.Example:8443/")
    clean_environment.setenv("RELAY_TRUSTED_PROXIES", "10.0.0.1, 192.168.0.0/16,,fd00::/8")
    clean_environment.setenv("DEBUG", "On")
    clean_environment.setenv("ARTIFACT_SYNC_OVERLAP_SECONDS", "300")
    clean_environment.setenv("ARTIFACT_SYNC_TOKEN_MAX_AGE", "3600")
    config = read_config()
    assert config.redis_url == "rediss://cache:6380/2"
    assert config.public_url == "https://relay.example:8443"
    assert config.trusted_proxies == ("10.0.0.1/32", "192.168.0.0/16", "fd00::/8")
    assert config.debug is True
    assert (config.overlap_seconds, config.token_max_age_seconds) == (300, 3600)


def test_secret_key_is_derived_from_the_relay_key_in_production(
    clean_environment: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    derived = read_config().secret_key
    assert derived == read_config().secret_key  # same on every instance and restart
    assert KEY not in derived
    clean_environment.setenv("RELAY_SIGNING_KEY", OTHER_KEY)
    assert read_config().secret_key != derived
    secret_file = tmp_path / "django.secret"
    secret_file.write_text("from-a-file\n")
    clean_environment.setenv("SECRET_KEY_FILE", str(secret_file))
    assert read_config().secret_key == "from-a-file"
    clean_environment.delenv("SECRET_KEY_FILE")
    clean_environment.setenv("DEBUG", "true")
    assert read_config().secret_key.startswith("buzz-dev-")


def test_transaction_pooling_needs_a_direct_url_and_turns_prepared_statements_off(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    assert read_config().database_pooler == ""
    assert read_config().database_prepared_statements is True
    message = error_of(clean_environment, DATABASE_POOLER="transaction")
    assert message.startswith("DATABASE_POOLER=transaction needs DATABASE_DIRECT_URL")
    clean_environment.setenv("DATABASE_DIRECT_URL", "postgres://relay:pw@db.internal:5432/buzz")
    config = read_config()
    assert config.database_pooler == "transaction"
    assert config.database_direct is not None and config.database_direct.port == "5432"
    # Debian 12's PgBouncer (1.18) does not track prepared statements; 1.21+ may opt back in.
    assert config.database_prepared_statements is False
    clean_environment.setenv("DATABASE_PREPARED_STATEMENTS", "true")
    assert read_config().database_prepared_statements is True
    # Session pooling keeps a client's session: nothing changes, no direct URL needed.
    clean_environment.delenv("DATABASE_DIRECT_URL")
    clean_environment.delenv("DATABASE_PREPARED_STATEMENTS")
    clean_environment.setenv("DATABASE_POOLER", "Session")
    config = read_config()
    assert (config.database_pooler, config.database_prepared_statements) == ("session", True)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"DATABASE_POOLER": "statement"},
         "DATABASE_POOLER must be session or transaction, or unset (got 'statement')"),
        ({"DATABASE_DIRECT_URL": "mysql://db/buzz"},
         "DATABASE_DIRECT_URL must look like postgres://user:password@host:5432/dbname"
         " (got scheme 'mysql')"),
        ({"REDIS_SENTINELS": "10.0.0.1:26379"},
         "REDIS_SENTINELS needs REDIS_URL=redis://<master name>/<db> (its host part names the"
         " master the sentinels monitor)"),
        ({"REDIS_URL": "redis://mymaster/0", "REDIS_SENTINELS": "10.0.0.1:26379,10.0.0.2"},
         "REDIS_SENTINELS must be [[user]:password@]host:port[,host:port...] (got '10.0.0.2')"),
        ({"REDIS_URL": "redis://mymaster/0", "REDIS_SENTINELS": "secret@10.0.0.1:26379"},
         "REDIS_SENTINELS takes the sentinels' credentials as [user]:password@ before the"
         " addresses (a URL's form)"),
        ({"REDIS_URL": "redis://mymaster/0", "REDIS_SENTINELS": ":a@10.0.0.1:26379",
          "REDIS_SENTINEL_PASSWORD": "b"},
         "set the sentinels' password in REDIS_SENTINEL_PASSWORD or in REDIS_SENTINELS, not"
         " both"),
        ({"REDIS_URL": "redis://mymaster/0", "REDIS_SENTINEL_PASSWORD": "b"},
         "REDIS_SENTINEL_PASSWORD needs REDIS_SENTINELS"),
    ],
)
def test_bad_pooler_and_sentinel_values_are_refused(
    clean_environment: pytest.MonkeyPatch, values: dict[str, str], expected: str
) -> None:
    assert error_of(clean_environment, **values) == expected


def test_sentinels_are_listed(clean_environment: pytest.MonkeyPatch) -> None:
    clean_environment.setenv("REDIS_URL", "redis://:secret@mymaster/3")
    clean_environment.setenv("REDIS_SENTINELS", "10.0.0.1:26379, [fd00::2]:26380")
    sentinels = read_config().redis_sentinels
    assert sentinels.addresses == (("10.0.0.1", 26379), ("fd00::2", 26380))
    # REDIS_URL's password is the master's: the sentinels ask for none unless told.
    assert (sentinels.username, sentinels.password) == (None, None)


def test_the_sentinels_password_is_read_from_its_variable_its_file_or_the_list(
    clean_environment: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_environment.setenv("REDIS_URL", "redis://:master@mymaster/3")
    clean_environment.setenv("REDIS_SENTINELS", "10.0.0.1:26379,10.0.0.2:26379")
    clean_environment.setenv("REDIS_SENTINEL_PASSWORD", "s3cret")
    assert read_config().redis_sentinels.password == "s3cret"
    clean_environment.delenv("REDIS_SENTINEL_PASSWORD")
    (tmp_path / "pw").write_text("from-file\n")
    clean_environment.setenv("REDIS_SENTINEL_PASSWORD_FILE", str(tmp_path / "pw"))
    assert read_config().redis_sentinels.password == "from-file"
    clean_environment.delenv("REDIS_SENTINEL_PASSWORD_FILE")
    clean_environment.setenv("REDIS_SENTINELS", "watcher:p%40ss@10.0.0.1:26379,[fd00::2]:26380")
    sentinels = read_config().redis_sentinels
    assert (sentinels.username, sentinels.password) == ("watcher", "p@ss")
    assert sentinels.addresses == (("10.0.0.1", 26379), ("fd00::2", 26380))
    clean_environment.setenv("REDIS_SENTINELS", ":only-pw@10.0.0.1:26379")
    assert read_config().redis_sentinels.username is None


def test_console_defaults_and_values(clean_environment: pytest.MonkeyPatch) -> None:
    default = read_config().console
    assert (default.require_2fa, default.allowed_networks, default.session_idle_seconds,
            default.login_failure_limit, default.login_lockout_seconds,
            default.hsts_seconds) == (False, (), 1800, 10, 3600, 0)
    for name, value in {
        "ADMIN_REQUIRE_2FA": "yes", "ADMIN_ALLOWED_NETWORKS": "10.1.2.3, fd00::/8",
        "ADMIN_SESSION_IDLE_MINUTES": "15", "ADMIN_LOGIN_FAILURE_LIMIT": "5",
        "ADMIN_LOGIN_LOCKOUT_MINUTES": "0", "RELAY_HSTS_SECONDS": "31536000",
        "RELAY_PUBLIC_URL": "https://relay.example",
    }.items():
        clean_environment.setenv(name, value)
    console = read_config().console
    assert console.require_2fa is True
    assert console.allowed_networks == ("10.1.2.3/32", "fd00::/8")
    assert (console.session_idle_seconds, console.login_failure_limit,
            console.login_lockout_seconds, console.hsts_seconds) == (900, 5, 0, 31536000)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"ADMIN_REQUIRE_2FA": "sometimes"}, "ADMIN_REQUIRE_2FA must be true or false (got "
         "'sometimes')"),
        ({"ADMIN_ALLOWED_NETWORKS": "10.0.0.0/8,office"}, "ADMIN_ALLOWED_NETWORKS must list IP "
         "addresses or networks (bad entry 'office')"),
        ({"ADMIN_SESSION_IDLE_MINUTES": "0"}, "ADMIN_SESSION_IDLE_MINUTES must be at least 1 "
         "(got 0)"),
        ({"ADMIN_LOGIN_FAILURE_LIMIT": "ten"}, "ADMIN_LOGIN_FAILURE_LIMIT must be a whole number "
         "of attempts (got 'ten')"),
        ({"ADMIN_LOGIN_LOCKOUT_MINUTES": "-5"}, "ADMIN_LOGIN_LOCKOUT_MINUTES must be at least 0 "
         "(got -5)"),
        ({"RELAY_HSTS_SECONDS": "3600"}, "RELAY_HSTS_SECONDS needs RELAY_PUBLIC_URL=https://... "
         "(HSTS is only sent over https)"),
        ({"RELAY_HSTS_SECONDS": "3600", "RELAY_PUBLIC_URL": "http://relay.example"},
         "RELAY_HSTS_SECONDS needs RELAY_PUBLIC_URL=https://... (HSTS is only sent over https)"),
    ],
)
def test_bad_console_values_are_refused(
    clean_environment: pytest.MonkeyPatch, values: dict[str, str], expected: str
) -> None:
    assert error_of(clean_environment, **values) == expected
