"""The incremental-reads schema: what it must be (PROTOCOL.md section 7 items 1-3) and what it is.

One place holds the expected definitions of the five sync columns and five sync indexes and the
functions that inspect a live database against them. Migrations 0076-0078, `buzz-admin migrate`,
`build-indexes` and `check`, and the readiness checks all read from here, so the definition an
operator is told to build is the one every check verifies.

Inspection reads only the catalogs and `pg_stat_progress_create_index` (plus `django_migrations`
for the ledger): cheap enough for a staff page, and it never takes a lock on the tables.
The functions accept a Django connection or a psycopg connection: both hand out DB-API cursors.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from django.db.backends.base.base import BaseDatabaseWrapper

Connection = BaseDatabaseWrapper | psycopg.Connection[Any]

APP_LABEL = "artifacts"
MIGRATION_0076 = "0076_artifact_revision_lookup"
MIGRATION_0077 = "0077_artifact_sync_timestamps"
MIGRATION_0078 = "0078_artifact_sync_indexes"
SYNC_MIGRATIONS = (MIGRATION_0076, MIGRATION_0077, MIGRATION_0078)
MIGRATION_0080 = "0080_artifact_heads_replay_index"

# The constant the timestamp columns are added with: existing rows read it from the catalog
# (PostgreSQL's "missing value"), so adding the column rewrites nothing, and an initial round
# (which reads every stamp) includes them.
EPOCH = "1970-01-01 00:00:00+00"

# Budgets for the transactional steps. Short on purpose: an ALTER TABLE waiting behind a long
# transaction queues every writer of the table behind it, so it gives up quickly instead
# (buzz-admin migrate retries), and an in-transaction index build is only ever done on an empty
# table, where it takes milliseconds.
LOCK_TIMEOUT = "2s"
STATEMENT_TIMEOUT = "15s"

BUILD_COMMAND = "buzz-admin build-indexes"
MIGRATE_COMMAND = "buzz-admin migrate"


@dataclass(frozen=True)
class ColumnSpec:
    """One sync column as PROTOCOL.md section 7 item 2 defines it."""

    table: str
    column: str
    data_type: str  # as format_type() prints it
    not_null: bool
    default: str | None  # as pg_get_expr() prints it; None = no default
    add_default: str | None  # the constant 0077 adds it with, so no row is rewritten

    @property
    def label(self) -> str:
        return f"{self.table}.{self.column}"

    @property
    def expected(self) -> str:
        return describe_column(self.data_type, self.not_null, self.default)

    def add_sql(self) -> str:
        sql = f"ALTER TABLE {self.table} ADD COLUMN IF NOT EXISTS {self.column} {self.data_type}"
        if self.not_null:
            sql += " NOT NULL"
        if self.add_default is not None:
            sql += f" DEFAULT '{self.add_default}'"
        return sql

    def default_sql(self) -> str:
        """Make the default the expected one (a catalog change: no row is touched)."""
        change = f"SET DEFAULT {self.default}" if self.default is not None else "DROP DEFAULT"
        return f"ALTER TABLE {self.table} ALTER COLUMN {self.column} {change}"

    def drop_sql(self) -> str:
        return f"ALTER TABLE {self.table} DROP COLUMN IF EXISTS {self.column}"


def _stamp(table: str, column: str) -> ColumnSpec:
    return ColumnSpec(table, column, "timestamp with time zone", True, "now()", EPOCH)


COLUMNS: tuple[ColumnSpec, ...] = (
    _stamp("artifact_heads", "modified_at"),
    _stamp("artifact_revisions", "modified_at"),
    ColumnSpec("artifact_revisions", "source_channel_id", "uuid", False, None, None),
    _stamp("channel_members", "sync_modified_at"),
    _stamp("communities", "artifact_policy_modified_at"),
)


@dataclass(frozen=True)
class IndexSpec:
    """One sync index as PROTOCOL.md section 7 item 3 defines it."""

    name: str
    table: str
    columns: tuple[str, ...]  # index keys, each a column with its order when not ascending
    predicate: str | None  # as pg_get_indexdef() prints it, without the parentheses
    predicate_columns: tuple[str, ...]
    migration: str  # the migration that verifies it

    @property
    def needed_columns(self) -> tuple[str, ...]:
        # A key may carry its order ("created_at DESC"): the column is its first word.
        return tuple(key.split()[0] for key in self.columns) + self.predicate_columns

    @property
    def definition(self) -> str:
        """The definition as pg_get_indexdef() prints it, in normal form (see normalize)."""
        sql = f"CREATE INDEX {self.name} ON {self.table} USING btree ({', '.join(self.columns)})"
        if self.predicate:
            sql += f" WHERE ({self.predicate})"
        return normalize_indexdef(sql)

    def create_sql(self, *, concurrently: bool) -> str:
        how = "CONCURRENTLY " if concurrently else ""
        sql = f"CREATE INDEX {how}{self.name} ON {self.table} ({', '.join(self.columns)})"
        if self.predicate:
            sql += f" WHERE {self.predicate}"
        return sql

    def drop_sql(self, *, concurrently: bool) -> str:
        how = "CONCURRENTLY " if concurrently else ""
        return f"DROP INDEX {how}IF EXISTS {self.name}"


INDEXES: tuple[IndexSpec, ...] = (
    IndexSpec(
        "idx_artifact_revisions_artifact", "artifact_revisions",
        ("community_id", "artifact_id"), None, (), MIGRATION_0076,
    ),
    IndexSpec(
        "artifact_heads_modified", "artifact_heads",
        ("community_id", "modified_at", "artifact_id"), None, (), MIGRATION_0078,
    ),
    IndexSpec(
        "artifact_heads_channel", "artifact_heads",
        ("community_id", "channel_id", "artifact_id"), None, (), MIGRATION_0078,
    ),
    IndexSpec(
        "channel_members_sync", "channel_members",
        ("community_id", "pubkey", "sync_modified_at", "channel_id"), None, (), MIGRATION_0078,
    ),
    IndexSpec(
        "artifact_revisions_moves", "artifact_revisions",
        ("community_id", "modified_at", "event_id"), "source_channel_id IS NOT NULL",
        ("source_channel_id",), MIGRATION_0078,
    ),
)
# Not a sync index (incremental reads and readiness do not depend on it): the WebSocket
# replay's order, newest head first within a channel (PROTOCOL.md section 8), so a REQ with a
# limit reads `limit` heads of each readable channel instead of all of them and a sort
# (bench/peer.py: 500 of a 10,000-artifact channel, the heads' part 37-62 ms -> 4.5 ms).
# Built like the sync indexes: concurrently by build-indexes, verified by its migration.
REPLAY_INDEX = IndexSpec(
    "artifact_heads_replay", "artifact_heads",
    ("community_id", "channel_id", "created_at DESC", "event_id"), None, (), MIGRATION_0080,
)
# What build-indexes builds and the migrations verify: the sync indexes, then the replay's.
BUILT_INDEXES: tuple[IndexSpec, ...] = (*INDEXES, REPLAY_INDEX)
INDEXES_BY_NAME = {spec.name: spec for spec in BUILT_INDEXES}


def indexes_of(migration: str) -> tuple[IndexSpec, ...]:
    return tuple(spec for spec in BUILT_INDEXES if spec.migration == migration)


_SCHEMA_QUALIFIER = re.compile(r" on (only )?[a-z_][a-z0-9_$]*\.")


def normalize_indexdef(definition: str) -> str:
    """pg_get_indexdef() text in a form that compares equal across servers and search paths.

    Lowercase, identifier quotes dropped, whitespace collapsed, and the table's schema removed
    (pg_get_indexdef qualifies it as `public.` or not depending on the search path).
    """
    text = " ".join(definition.replace('"', "").split()).lower()
    return _SCHEMA_QUALIFIER.sub(lambda m: f" on {m.group(1) or ''}", text)


def describe_column(data_type: str, not_null: bool, default: str | None) -> str:
    text = data_type + (" NOT NULL" if not_null else " NULL")
    return text + (f" DEFAULT {default}" if default is not None else " no default")


# --- what the live database holds -------------------------------------------------------------


@dataclass(frozen=True)
class LedgerRow:
    """One sync migration's row in Django's ledger (`django_migrations`), item 1."""

    app: str
    name: str
    applied_at: datetime | None  # None: not recorded

    @property
    def label(self) -> str:
        return f"{self.app}.{self.name}"

    @property
    def ok(self) -> bool:
        return self.applied_at is not None

    @property
    def fix(self) -> str:
        return "" if self.ok else f"run `{MIGRATE_COMMAND}` (records it after verifying)"


@dataclass(frozen=True)
class ColumnCheck:
    """One sync column compared with its expected shape, item 2."""

    spec: ColumnSpec
    table_exists: bool
    found_type: str | None  # None: the column does not exist
    found_not_null: bool | None
    found_default: str | None  # pg_get_expr of the default, None when there is none

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def exists(self) -> bool:
        return self.found_type is not None

    @property
    def expected(self) -> str:
        return self.spec.expected

    @property
    def found(self) -> str | None:
        """The column as it is, in the same words as `expected`; None when it does not exist."""
        if self.found_type is None:
            return None
        return describe_column(self.found_type, bool(self.found_not_null), self.found_default)

    @property
    def shape_ok(self) -> bool:
        """Type and nullability match (what 0077 cannot repair by itself)."""
        return self.found_type == self.spec.data_type and self.found_not_null == self.spec.not_null

    @property
    def ok(self) -> bool:
        return self.exists and self.shape_ok and self.found_default == self.spec.default

    @property
    def problem(self) -> str:
        if self.ok:
            return ""
        if not self.table_exists:
            return f"table {self.spec.table} does not exist"
        if not self.exists:
            return "missing"
        if not self.shape_ok:
            return f"is {self.found}, expected {self.expected}"
        return f"default is {self.found_default or 'none'}, expected {self.spec.default or 'none'}"

    @property
    def fix(self) -> str:
        if self.ok:
            return ""
        if not self.table_exists or not self.exists or self.shape_ok:
            return f"run `{MIGRATE_COMMAND}` (0077 adds it or resets its default, no rewrite)"
        return (
            f"repair by hand: 0077 never changes an existing column's type or nullability "
            f"(that would rewrite or scan {self.spec.table}); make it {self.expected}"
        )


@dataclass(frozen=True)
class IndexCheck:
    """One sync index compared with its expected definition and flags, item 3."""

    spec: IndexSpec
    table_exists: bool
    missing_columns: tuple[str, ...]  # columns the index needs that do not exist yet
    found_definition: str | None  # pg_get_indexdef(), None when no index has the name
    valid: bool | None
    ready: bool | None
    live: bool | None
    building_pid: int | None  # backend running a CREATE INDEX for it right now

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def exists(self) -> bool:
        return self.found_definition is not None

    @property
    def expected_definition(self) -> str:
        return self.spec.definition

    @property
    def definition_ok(self) -> bool:
        return (
            self.found_definition is not None
            and normalize_indexdef(self.found_definition) == self.spec.definition
        )

    @property
    def flags_ok(self) -> bool:
        return bool(self.valid and self.ready and self.live)

    @property
    def ok(self) -> bool:
        return self.definition_ok and self.flags_ok

    @property
    def flags(self) -> str:
        if not self.exists:
            return "-"
        return " ".join(
            word if flag else f"NOT-{word}"
            for word, flag in (("valid", self.valid), ("ready", self.ready), ("live", self.live))
        )

    @property
    def state(self) -> str:
        """One word or phrase for tables: ok, missing, invalid, wrong definition, building, ..."""
        if self.ok:
            return "ok"
        if not self.table_exists:
            return "no table"
        if self.building_pid is not None:
            return "building"
        if not self.exists:
            return "waiting for 0077" if self.missing_columns else "missing"
        if not self.flags_ok:
            return "invalid"
        return "wrong definition"

    @property
    def problem(self) -> str:
        state = self.state
        if state == "ok":
            return ""
        if state == "no table":
            return f"table {self.spec.table} does not exist"
        if state == "building":
            return f"a CREATE INDEX for it is running (backend pid {self.building_pid})"
        if state == "waiting for 0077":
            return f"its columns do not exist yet: {', '.join(self.missing_columns)}"
        if state == "missing":
            return f"no index named {self.name}"
        if state == "invalid":
            return f"flags: {self.flags} (a failed or interrupted concurrent build)"
        return f"found {self.found_definition!r}, expected {self.expected_definition!r}"

    @property
    def fix(self) -> str:
        state = self.state
        build = f"{self.spec.create_sql(concurrently=True)};"
        drop = f"{self.spec.drop_sql(concurrently=True)};"
        if state == "ok":
            return ""
        if state == "no table":
            return f"run `{MIGRATE_COMMAND}`"
        if state == "building":
            return "wait for the running build to finish, then check again"
        if state == "waiting for 0077":
            return f"run `{MIGRATE_COMMAND}` to apply 0077, then `{BUILD_COMMAND}`"
        if state == "missing":
            return f"run `{BUILD_COMMAND}`, or outside a transaction: {build}"
        if state == "invalid":
            return f"run `{BUILD_COMMAND}` (drops and rebuilds it), or by hand: {drop} then {build}"
        return (
            f"run `{BUILD_COMMAND} --replace-mismatched`, or by hand: {drop} then {build}"
        )


@dataclass(frozen=True)
class SchemaReport:
    """PROTOCOL.md section 7 items 1-3 for one database."""

    ledger: tuple[LedgerRow, ...]
    columns: tuple[ColumnCheck, ...]
    indexes: tuple[IndexCheck, ...]

    @property
    def ok(self) -> bool:
        return (
            all(row.ok for row in self.ledger)
            and all(check.ok for check in self.columns)
            and all(check.ok for check in self.indexes)
        )

    @property
    def problems(self) -> list[str]:
        """One line per failing item: `<what>: <problem>`, for logs and one-line summaries."""
        lines = [f"{row.label}: not recorded in the migration ledger" for row in self.ledger
                 if not row.ok]
        lines += [f"{check.label}: {check.problem}" for check in self.columns if not check.ok]
        lines += [f"{check.name}: {check.problem}" for check in self.indexes if not check.ok]
        return lines


@contextmanager
def _cursor(connection: Connection) -> Iterator[Any]:
    with connection.cursor() as cursor:
        yield cursor


def ledger_rows(connection: Connection) -> list[LedgerRow]:
    """The ledger rows of 0076-0078 (item 1); unrecorded ones have `applied_at` None."""
    with _cursor(connection) as cursor:
        cursor.execute("SELECT to_regclass('django_migrations') IS NOT NULL")
        recorded: dict[str, datetime] = {}
        if cursor.fetchone()[0]:
            cursor.execute(
                "SELECT name, max(applied) FROM django_migrations "
                "WHERE app = %s AND name = ANY(%s) GROUP BY name",
                [APP_LABEL, list(SYNC_MIGRATIONS)],
            )
            recorded = dict(cursor.fetchall())
    return [LedgerRow(APP_LABEL, name, recorded.get(name)) for name in SYNC_MIGRATIONS]


def inspect_one_column(connection: Connection, spec: ColumnSpec) -> ColumnCheck:
    with _cursor(connection) as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [spec.table])
        table_exists = bool(cursor.fetchone()[0])
        row = None
        if table_exists:
            cursor.execute(
                """
                SELECT format_type(a.atttypid, a.atttypmod), a.attnotnull,
                       pg_get_expr(d.adbin, d.adrelid)
                FROM pg_attribute a
                LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                WHERE a.attrelid = to_regclass(%s) AND a.attname = %s
                  AND a.attnum > 0 AND NOT a.attisdropped
                """,
                [spec.table, spec.column],
            )
            row = cursor.fetchone()
    if row is None:
        return ColumnCheck(spec, table_exists, None, None, None)
    return ColumnCheck(spec, table_exists, row[0], bool(row[1]), row[2])


def inspect_columns(connection: Connection) -> list[ColumnCheck]:
    """The five sync columns (item 2), in PROTOCOL.md order."""
    return [inspect_one_column(connection, spec) for spec in COLUMNS]


def inspect_index(connection: Connection, spec: IndexSpec) -> IndexCheck:
    with _cursor(connection) as cursor:
        cursor.execute(
            """
            SELECT array_agg(a.attname::text)
            FROM pg_attribute a
            WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped
            """,
            [spec.table],
        )
        present = cursor.fetchone()[0]
        cursor.execute(
            """
            SELECT pg_get_indexdef(i.indexrelid), i.indisvalid, i.indisready, i.indislive,
                   (SELECT p.pid FROM pg_stat_progress_create_index p
                    WHERE p.index_relid = i.indexrelid LIMIT 1)
            FROM pg_index i
            WHERE i.indexrelid = to_regclass(%s)
            """,
            [spec.name],
        )
        row = cursor.fetchone()
    table_exists = present is not None
    missing = tuple(c for c in spec.needed_columns if table_exists and c not in present)
    if row is None:
        return IndexCheck(spec, table_exists, missing, None, None, None, None, None)
    return IndexCheck(spec, table_exists, missing, row[0], row[1], row[2], row[3], row[4])


def inspect_indexes(connection: Connection) -> list[IndexCheck]:
    """The five sync indexes (item 3), in PROTOCOL.md order."""
    return [inspect_index(connection, spec) for spec in INDEXES]


def inspect_schema(connection: Connection) -> SchemaReport:
    """Items 1-3 in one report."""
    return SchemaReport(
        tuple(ledger_rows(connection)),
        tuple(inspect_columns(connection)),
        tuple(inspect_indexes(connection)),
    )


def table_has_rows(connection: Connection, table: str) -> bool:
    """Whether `table` holds at least one row: stops at the first row it finds."""
    with _cursor(connection) as cursor:
        cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {table})")
        return bool(cursor.fetchone()[0])


class SchemaNotReady(Exception):
    """A migration refuses to run until an operator acts; the message names the fix.

    `indexes` and `columns` carry the failing checks so a caller can print them as a table.
    """

    def __init__(
        self,
        message: str,
        *,
        migration: str,
        indexes: Sequence[IndexCheck] = (),
        columns: Sequence[ColumnCheck] = (),
    ) -> None:
        super().__init__(message)
        self.migration = migration
        self.indexes = tuple(indexes)
        self.columns = tuple(columns)


def sync_columns_sql() -> list[str]:
    """0077 as plain SQL, for an operator applying it by hand (inside one transaction).

    Idempotent: ADD COLUMN IF NOT EXISTS skips existing columns; SET DEFAULT only rewrites the
    default's catalog entry. The migration itself skips even that when nothing differs.
    """
    statements = [
        f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'",
        f"SET LOCAL statement_timeout = '{STATEMENT_TIMEOUT}'",
    ]
    statements += [spec.add_sql() for spec in COLUMNS]
    statements += [spec.default_sql() for spec in COLUMNS if spec.default is not None]
    return statements
