"""The six items of PROTOCOL.md section 7, read from one connection, read-only.

`inspect_deployment(connection)` works on a Django or a psycopg connection, so `buzz-admin
readiness` checks other deployments with the same code. Items 1-3 come from `artifacts.schema`,
which also drives the migrations, so the definitions an operator is told to build are the ones
verified here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from django.conf import settings

from relayinfo.readiness.report import (
    APPLICATION_PREFIX,
    CHECK_IDS,
    TITLES,
    Check,
    ConnectionRow,
    EpisodeRow,
    FleetReport,
    InstanceRow,
    ReadinessReport,
    RoleRow,
    parse_application_name,
)

if TYPE_CHECKING:
    from artifacts.schema import Connection, SchemaReport

logger = logging.getLogger(__name__)

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
        # (only a serving process's fleet refresher pays it, never a request).
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

