"""Deployment readiness (PROTOCOL.md section 7): the one verdict NIP-11, rounds, system checks,
`buzz-admin readiness`, /metrics and the staff page all show.

Each of the six items is a `Check` (what was found, and the fix). `inspect_deployment(connection)`
is read-only and works on a Django or a psycopg connection, so `buzz-admin readiness` checks other
deployments with the same code. `evaluate_readiness()` is the serving process's verdict about its
own database: cached a few seconds per process, and it keeps the sync epoch honest about item 4
(see `_reconcile_episode`).

Items 1-3 come from `artifacts.schema`, which also drives the migrations, so the definitions an
operator is told to build are the ones verified here.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from django.conf import settings
from django.db import connection as django_connection
from django.db import transaction

if TYPE_CHECKING:
    from artifacts.schema import Connection, SchemaReport

logger = logging.getLogger(__name__)

# Stable ids: system checks (buzz.W00<item>), metrics labels and tests name checks by them.
CHECK_IDS = {1: "ledger", 2: "columns", 3: "indexes", 4: "writers", 5: "relay_key", 6: "fence"}
TITLES = {
    1: "Migrations 0076-0078 are recorded in the ledger",
    2: "The five sync columns have their type, default and nullability",
    3: "The five sync indexes exist, valid, ready and live",
    4: "Every live writer stamps, and all hold one relay key",
    5: "A stable relay key is configured",
    6: "The fence sees every writer",
}
# The columns of the reference's deployment table (buzz-admin readiness), by item.
AREAS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("Schema and indexes", (1, 2, 3)),
    ("Running timestamp writers", (4,)),
    ("Relay key", (5,)),
    ("Fence", (6,)),
)
APPLICATION_PREFIX = "buzzrelay/"


@dataclass(frozen=True)
class Check:
    item: int
    id: str
    title: str
    passed: bool
    found: str
    fix: str = ""

    @property
    def system_check_id(self) -> str:
        return f"buzz.W{self.item:03d}"


@dataclass(frozen=True)
class Announced:
    """What a `buzzrelay/...` application_name announces (PROTOCOL.md section 7 item 4)."""

    version: str
    stamps: bool
    key_id: str | None


def parse_application_name(name: str | None) -> Announced | None:
    """`buzzrelay/<version> stamps=1 key=<8 hex>` -> Announced; None for any other application."""
    if not name or not name.startswith(APPLICATION_PREFIX):
        return None
    words = name.split()
    version = words[0][len(APPLICATION_PREFIX):]
    key_id = next((w[4:] for w in words[1:] if w.startswith("key=")), None)
    return Announced(version=version, stamps="stamps=1" in words[1:], key_id=key_id or None)


@dataclass(frozen=True)
class InstanceRow:
    hostname: str
    pid: int
    version: str
    stamps: bool
    key_id: str
    key_generated: bool
    started_at: datetime
    last_seen_at: datetime
    live: bool  # seen within three refresh intervals

    @property
    def label(self) -> str:
        return f"instance {self.hostname}:{self.pid} ({self.version})"


@dataclass(frozen=True)
class ConnectionRow:
    pid: int
    application_name: str
    role: str | None
    client: str | None
    backend_start: datetime | None
    announced: Announced

    @property
    def label(self) -> str:
        where = f" from {self.client}" if self.client else ""
        return f"connection pid {self.pid} ({self.application_name!r}, role {self.role}{where})"


@dataclass(frozen=True)
class EpisodeRow:
    id: int
    opened_at: datetime
    opened_epoch: int
    reason: str
    closed_at: datetime | None
    closed_epoch: int | None


@dataclass(frozen=True)
class FleetReport:
    """The live writers of one database: registered instances and `buzzrelay/` connections."""

    registry_present: bool
    instances: tuple[InstanceRow, ...]  # every registered row, stale ones included (for pages)
    connections: tuple[ConnectionRow, ...]
    problems: tuple[str, ...]  # item 4 failures right now
    episodes_present: bool
    open_episode: EpisodeRow | None

    @property
    def live_instances(self) -> tuple[InstanceRow, ...]:
        return tuple(row for row in self.instances if row.live)

    @property
    def key_ids(self) -> dict[str, int]:
        """Each key id announced by a live writer, with how many writers announce it."""
        counts: dict[str, int] = {}
        ids = [row.key_id for row in self.live_instances if row.key_id]
        ids += [c.announced.key_id for c in self.connections if c.announced.key_id]
        for key_id in ids:
            counts[key_id] = counts.get(key_id, 0) + 1
        return counts


@dataclass(frozen=True)
class RoleRow:
    name: str
    superuser: bool
    read_all_stats: bool

    @property
    def sees_every_writer(self) -> bool:
        return self.superuser or self.read_all_stats


@dataclass(frozen=True)
class ReadinessReport:
    checks: tuple[Check, ...]
    evaluated_at: float  # time.time() of the evaluation
    schema: SchemaReport | None = None
    fleet: FleetReport | None = None
    roles: tuple[RoleRow, ...] = ()
    max_prepared_transactions: int | None = None
    error: str | None = None  # the database could not be inspected at all
    notes: tuple[str, ...] = field(default=())

    @property
    def ready(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)

    @property
    def failing(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if not check.passed)

    def check(self, check_id: str) -> Check:
        return next(check for check in self.checks if check.id == check_id)

    def item(self, number: int) -> Check:
        return next(check for check in self.checks if check.item == number)

    def area_passed(self, items: Sequence[int]) -> bool:
        return all(self.item(number).passed for number in items)


# --- the six items, each from a connection ------------------------------------------------------


@contextmanager
def _cursor(connection: Connection) -> Iterator[Any]:
    with connection.cursor() as cursor:
        yield cursor


def _schema_checks(schema: SchemaReport) -> list[Check]:
    def lines(items: Sequence[Any], describe: Any) -> str:
        return "; ".join(describe(item) for item in items)

    ledger_missing = [row for row in schema.ledger if not row.ok]
    columns_bad = [col for col in schema.columns if not col.ok]
    indexes_bad = [idx for idx in schema.indexes if not idx.ok]
    return [
        Check(
            1, CHECK_IDS[1], TITLES[1], not ledger_missing,
            lines(ledger_missing, lambda r: f"{r.label}: not recorded")
            or "all three recorded",
            lines(ledger_missing[:1], lambda r: r.fix),
        ),
        Check(
            2, CHECK_IDS[2], TITLES[2], not columns_bad,
            lines(columns_bad, lambda c: f"{c.label}: {c.problem}") or "all five as expected",
            lines(columns_bad, lambda c: f"{c.label}: {c.fix}"),
        ),
        Check(
            3, CHECK_IDS[3], TITLES[3], not indexes_bad,
            lines(indexes_bad, lambda i: f"{i.name}: {i.problem}")
            or "all five valid, ready and live with their definitions",
            lines(indexes_bad, lambda i: f"{i.name}: {i.fix}"),
        ),
    ]


def _stale_after_seconds() -> int:
    return 3 * int(settings.RELAY_FLEET_REFRESH_SECONDS)


def _table_exists(cursor: Any, table: str) -> bool:
    cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [table])
    return bool(cursor.fetchone()[0])


def inspect_fleet(connection: Connection) -> FleetReport:
    """Registered instances, `buzzrelay/` connections of this database, and item 4's problems.

    application_name is visible in pg_stat_activity to every role, so this does not depend on
    item 6. Instances not refreshed for three intervals are stale: listed, not counted.
    """
    with _cursor(connection) as cursor:
        registry = _table_exists(cursor, "relay_instances")
        instances: list[InstanceRow] = []
        if registry:
            cursor.execute(
                """
                SELECT hostname, pid, version, stamps, key_id, key_generated, started_at,
                       last_seen_at, last_seen_at >= now() - make_interval(secs => %s)
                FROM relay_instances ORDER BY started_at, id
                """,
                [_stale_after_seconds()],
            )
            instances = [InstanceRow(*row) for row in cursor.fetchall()]
        cursor.execute(
            """
            SELECT pid, application_name, usename::text, client_addr::text, backend_start
            FROM pg_stat_activity
            WHERE datname = current_database() AND application_name LIKE %s
            ORDER BY pid
            """,
            [APPLICATION_PREFIX + "%"],
        )
        connections = []
        for pid, name, role, client, started in cursor.fetchall():
            announced = parse_application_name(name)
            if announced is not None:
                connections.append(ConnectionRow(pid, name, role, client, started, announced))
        episodes = _table_exists(cursor, "fleet_episodes")
        open_episode = None
        if episodes:
            cursor.execute(
                "SELECT id, opened_at, opened_epoch, reason, closed_at, closed_epoch "
                "FROM fleet_episodes WHERE closed_at IS NULL ORDER BY id LIMIT 1"
            )
            row = cursor.fetchone()
            open_episode = EpisodeRow(*row) if row else None
    report = FleetReport(registry, tuple(instances), tuple(connections), (), episodes, open_episode)
    return replace(report, problems=tuple(_writer_problems(report)))


def _writer_problems(fleet: FleetReport) -> list[str]:
    problems = [f"{row.label} does not stamp" for row in fleet.live_instances if not row.stamps]
    for conn in fleet.connections:
        if not conn.announced.stamps:
            problems.append(f"{conn.label} announces no stamps=1")
        elif conn.announced.key_id is None:
            problems.append(f"{conn.label} announces no key=")
    keys = fleet.key_ids
    if len(keys) > 1:
        listed = ", ".join(f"{key} ({count} writers)" for key, count in sorted(keys.items()))
        problems.append(f"live writers hold different relay keys: {listed}")
    return problems


def _writers_check(fleet: FleetReport) -> Check:
    live = len(fleet.live_instances)
    if fleet.problems:
        fixes = []
        if any("stamp" in p for p in fleet.problems):
            fixes.append(
                "stop or upgrade every writer that does not maintain the modification stamps "
                "(relay versions before 0.1.0); the sync epoch was bumped while it was live and "
                "is bumped again when it leaves, so no client continues across its writes"
            )
        if any("key" in p for p in fleet.problems):
            fixes.append(
                "configure the same RELAY_SIGNING_KEY on every instance and restart the others"
            )
        return Check(4, CHECK_IDS[4], TITLES[4], False, "; ".join(fleet.problems),
                     "; ".join(fixes))
    if fleet.open_episode is not None:
        # The offending writer left; the closing epoch bump is owed and has not happened yet
        # (only a serving process pays it, outside any request transaction).
        return Check(
            4, CHECK_IDS[4], TITLES[4], False,
            f"the writers agree again, but the sync epoch has not yet been bumped after "
            f"episode {fleet.open_episode.id} ({fleet.open_episode.reason})",
            "a serving relay instance bumps it within one refresh interval; "
            "or run `buzz-admin bump-epoch` and then restart one instance",
        )
    keys = ", ".join(sorted(fleet.key_ids)) or "none announced"
    return Check(
        4, CHECK_IDS[4], TITLES[4], True,
        f"{live} live instances, {len(fleet.connections)} relay connections, all stamping; "
        f"key id {keys}",
    )


def _relay_key_check(fleet: FleetReport | None, *, local_key_generated: bool | None) -> Check:
    problems = []
    if local_key_generated:
        problems.append("RELAY_SIGNING_KEY is not set: this process generated its key at start-up")
    live = fleet.live_instances if fleet is not None else ()
    problems += [f"{row.label} runs with a generated key" for row in live if row.key_generated]
    fix = (
        "set RELAY_SIGNING_KEY (or RELAY_SIGNING_KEY_FILE) to the deployment's 64-hex secret on "
        "every instance and restart them"
    )
    if problems:
        return Check(5, CHECK_IDS[5], TITLES[5], False, "; ".join(problems), fix)
    if local_key_generated is None and not live:
        # Seen from outside (buzz-admin): only registered instances can vouch for their key.
        return Check(
            5, CHECK_IDS[5], TITLES[5], False,
            "no live relay instance is registered, so no configured key could be confirmed",
            "start the relay (buzz-admin serve) with RELAY_SIGNING_KEY set, then check again",
        )
    return Check(5, CHECK_IDS[5], TITLES[5], True, "configured (not generated at start-up)")


def inspect_fence(
    connection: Connection, fleet: FleetReport | None, *, local: bool
) -> tuple[Check, tuple[RoleRow, ...], int]:
    """Item 6: the roles of the serving connections, and max_prepared_transactions."""
    roles = {conn.role for conn in (fleet.connections if fleet else ()) if conn.role}
    with _cursor(connection) as cursor:
        if local or not roles:
            cursor.execute("SELECT current_user::text")
            roles.add(cursor.fetchone()[0])
        cursor.execute(
            """
            SELECT rolname::text, rolsuper, pg_has_role(oid, 'pg_read_all_stats', 'MEMBER')
            FROM pg_roles WHERE rolname = ANY(%s) ORDER BY rolname
            """,
            [sorted(roles)],
        )
        rows = tuple(RoleRow(*row) for row in cursor.fetchall())
        cursor.execute("SELECT current_setting('max_prepared_transactions')::int")
        prepared = int(cursor.fetchone()[0])
    blind = [row for row in rows if not row.sees_every_writer]
    problems = [
        f"role {row.name} is neither superuser nor a member of pg_read_all_stats, so its fence "
        f"cannot see other roles' open transactions"
        for row in blind
    ]
    fixes = [f"GRANT pg_read_all_stats TO {row.name};" for row in blind]
    if prepared != 0:
        problems.append(
            f"max_prepared_transactions = {prepared}: prepared transactions escape the fence"
        )
        fixes.append("set max_prepared_transactions = 0 in postgresql.conf and restart PostgreSQL")
    found = "; ".join(problems) or (
        f"roles {', '.join(row.name for row in rows)} see every writer; "
        f"max_prepared_transactions = 0"
    )
    return Check(6, CHECK_IDS[6], TITLES[6], not problems, found, " ".join(fixes)), rows, prepared


def _failed(items: Sequence[int], found: str, fix: str) -> list[Check]:
    return [Check(item, CHECK_IDS[item], TITLES[item], False, found, fix) for item in items]


def inspect_deployment(
    connection: Connection, *, local_key_generated: bool | None = None
) -> ReadinessReport:
    """Every item of section 7 for the database behind `connection`, read-only.

    `local_key_generated` is the calling process's own RELAY_KEY_GENERATED when it is a serving
    process checking its own deployment; None when checking from outside (buzz-admin), where
    item 5 rests on the instances' registrations. The connection should be in autocommit mode
    (each catalog read its own statement, so pg_stat_activity is read fresh).
    """
    checks: list[Check] = []
    schema = fleet = None
    roles: tuple[RoleRow, ...] = ()
    prepared = None
    try:
        from artifacts.schema import inspect_schema

        schema = inspect_schema(connection)
        checks += _schema_checks(schema)
    except Exception as exc:
        logger.warning("readiness: schema inspection failed: %s", exc)
        checks += _failed((1, 2, 3), f"could not inspect the schema: {exc}", "see the error")
    try:
        fleet = inspect_fleet(connection)
        checks.append(_writers_check(fleet))
    except Exception as exc:
        logger.warning("readiness: fleet inspection failed: %s", exc)
        checks += _failed((4,), f"could not inspect the writers: {exc}", "see the error")
    checks.append(_relay_key_check(fleet, local_key_generated=local_key_generated))
    try:
        fence, roles, prepared = inspect_fence(
            connection, fleet, local=local_key_generated is not None
        )
        checks.append(fence)
    except Exception as exc:
        logger.warning("readiness: fence inspection failed: %s", exc)
        checks += _failed((6,), f"could not inspect roles and settings: {exc}", "see the error")
    checks.sort(key=lambda check: check.item)
    return ReadinessReport(
        tuple(checks), time.time(), schema, fleet, roles, prepared
    )


def unreachable_report(error: str) -> ReadinessReport:
    checks = _failed(range(1, 7), f"database unreachable: {error}",
                     "check DATABASE_URL and that PostgreSQL answers")
    return ReadinessReport(tuple(checks), time.time(), error=error)


# --- the serving process's verdict -------------------------------------------------------------

_cache_lock = threading.Lock()
_cached: ReadinessReport | None = None


def evaluate_readiness(*, use_cache: bool = True) -> ReadinessReport:
    """This deployment's verdict, as the serving process sees it; cached per process.

    Evaluations are serialized per process, so when the cache expires under load one request
    evaluates and the others wait for its answer rather than all querying the catalogs.
    """
    global _cached
    ttl = float(settings.RELAY_READINESS_CACHE_SECONDS)
    with _cache_lock:
        cached = _cached
        if use_cache and cached is not None and time.time() - cached.evaluated_at < ttl:
            return cached
        report = _evaluate_local()
        _cached = report
        return report


# The most one evaluation may wait on the database, in milliseconds.
EVALUATION_BUDGET_MS = 3000


def deployment_ready() -> bool:
    """Whether continuation rounds may be served and `artifacts.incremental` advertised.

    Cached a few seconds per process (RELAY_READINESS_CACHE_SECONDS). Safe to call inside a
    transaction or from async code: the evaluation then runs on a connection of its own, so it
    never takes a snapshot in the caller's transaction (the fence must be read first there).
    """
    return evaluate_readiness().ready


def cached_readiness() -> bool | None:
    """The verdict while this process's cached one is fresh, else None (never evaluates)."""
    cached, ttl = _cached, float(settings.RELAY_READINESS_CACHE_SECONDS)
    if cached is None or time.time() - cached.evaluated_at >= ttl:
        return None
    return cached.ready


def forget_cached_readiness() -> None:
    """Drop this process's cached verdict (the next call evaluates again)."""
    global _cached
    with _cache_lock:
        _cached = None


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _own_connection_is_usable() -> bool:
    """Django's connection of this thread can be used: no caller transaction, no event loop."""
    return not _in_event_loop() and not django_connection.in_atomic_block


@contextmanager
def separate_connection() -> Iterator[psycopg.Connection[Any]]:
    """A short-lived autocommit connection to this deployment, named like every relay one."""
    params = django_connection.settings_dict
    options = dict(params.get("OPTIONS") or {})
    options.pop("pool", None)
    options.pop("server_side_binding", None)
    options.pop("isolation_level", None)
    options.pop("assume_role", None)
    options["application_name"] = settings.RELAY_APPLICATION_NAME
    options.setdefault("connect_timeout", 5)
    budget = (
        f"-c statement_timeout={EVALUATION_BUDGET_MS} -c lock_timeout={EVALUATION_BUDGET_MS // 2}"
    )
    options["options"] = f"{options.get('options', '')} {budget}".strip()
    conn = psycopg.connect(
        dbname=params["NAME"], user=params["USER"], password=params["PASSWORD"] or None,
        host=params["HOST"] or None, port=params["PORT"] or None, autocommit=True, **options,
    )
    try:
        yield conn
    finally:
        conn.close()


def _evaluate_local() -> ReadinessReport:
    local_generated = bool(settings.RELAY_KEY_GENERATED)
    try:
        if _own_connection_is_usable():
            # Bounded like every read: a verdict must never hang NIP-11 or /query behind a lock
            # (a migration's, an operator's LOCK TABLE); timing out reads as "unreachable".
            with transaction.atomic(), django_connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL statement_timeout = {EVALUATION_BUDGET_MS}")
                cursor.execute(f"SET LOCAL lock_timeout = {EVALUATION_BUDGET_MS // 2}")
                report = inspect_deployment(
                    django_connection, local_key_generated=local_generated
                )
            return _reconcile_episode(report, local_generated)
        with separate_connection() as conn:
            return inspect_deployment(conn, local_key_generated=local_generated)
    except Exception as exc:
        logger.warning("readiness: database unreachable: %s", exc)
        return unreachable_report(f"{type(exc).__name__}: {exc}")


def _reconcile_episode(report: ReadinessReport, local_generated: bool) -> ReadinessReport:
    """Bump the sync epoch when item 4 starts failing, and again once it stops.

    Why twice. A writer that does not stamp makes changes no round can find by stamps. Opening
    the episode bumps while that writer is still live, so every token issued before (some from
    rounds that ran after its first unstamped write, before anyone noticed) resets. While it is
    live the deployment is not ready, so every round is a full round; but the tokens those full
    rounds hand out carry the new epoch, and that writer may still change data after their T.
    Closing the episode therefore bumps again, after it has left (its connection is gone, so
    every transaction it ran has ended) and before any process reports ready: no token from
    before its last write can continue. The open episode row is what makes the closing bump owed
    across processes and restarts; until it is paid, item 4 fails in every process's verdict.
    One bump on each edge, never one per evaluation: transitions take the sync_state row lock
    and re-read the episode under it.
    """
    fleet = report.fleet
    if fleet is None or not fleet.episodes_present:
        return report
    failing_now = bool(fleet.problems)
    if failing_now == (fleet.open_episode is not None):
        return report
    try:
        changed = _open_episode(fleet) if failing_now else _close_episode()
    except Exception as exc:
        logger.warning("readiness: could not record the item 4 episode: %s", exc)
        return report
    if not changed:
        return report
    return inspect_deployment(django_connection, local_key_generated=local_generated)


def _lock_sync_state(cursor: Any) -> None:
    # Every transition holds this row lock: two processes never both open (or close) an episode.
    cursor.execute("SELECT epoch FROM sync_state WHERE id = 1 FOR UPDATE")


def _open_episode(fleet: FleetReport) -> bool:
    from relayinfo.sync_epoch import bump_epoch

    reason = "readiness item 4 failed: " + "; ".join(fleet.problems)
    with transaction.atomic(), django_connection.cursor() as cursor:
        _lock_sync_state(cursor)
        cursor.execute("SELECT 1 FROM fleet_episodes WHERE closed_at IS NULL LIMIT 1")
        if cursor.fetchone() is not None:
            return False
        epoch = bump_epoch(reason=reason)
        cursor.execute(
            "INSERT INTO fleet_episodes (opened_at, opened_epoch, reason) VALUES (now(), %s, %s)",
            [epoch, reason[:2000]],
        )
    logger.warning("sync epoch bumped to %s: %s", epoch, reason)
    return True


def _close_episode() -> bool:
    from relayinfo.sync_epoch import bump_epoch

    with transaction.atomic(), django_connection.cursor() as cursor:
        _lock_sync_state(cursor)
        cursor.execute(
            "SELECT id FROM fleet_episodes WHERE closed_at IS NULL ORDER BY id FOR UPDATE"
        )
        open_ids = [row[0] for row in cursor.fetchall()]
        if not open_ids:
            return False
        # Read the writers again inside the lock (pg_stat_activity is read afresh by the first
        # access in a transaction): close only if the offending writer is really gone.
        if inspect_fleet(django_connection).problems:
            return False
        epoch = bump_epoch(reason="readiness item 4 passes again: non-stamping writer left")
        cursor.execute(
            "UPDATE fleet_episodes SET closed_at = now(), closed_epoch = %s WHERE id = ANY(%s)",
            [epoch, open_ids],
        )
    logger.warning("sync epoch bumped to %s: readiness item 4 passes again", epoch)
    return True
