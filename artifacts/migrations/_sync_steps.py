"""The bodies of migrations 0076-0078 (this module's leading underscore hides it from Django's
migration loader). Each runs inside its migration's transaction, under the short budgets of
`artifacts.schema`; the expected definitions and the inspection they rely on live there.
"""

from __future__ import annotations

from collections.abc import Sequence

from artifacts.schema import (
    APP_LABEL,
    BUILD_COMMAND,
    COLUMNS,
    LOCK_TIMEOUT,
    MIGRATE_COMMAND,
    MIGRATION_0077,
    STATEMENT_TIMEOUT,
    Connection,
    IndexCheck,
    SchemaNotReady,
    indexes_of,
    inspect_columns,
    inspect_index,
    table_has_rows,
)


def set_migration_budgets(connection: Connection) -> None:
    """Short lock and statement budgets for the rest of the current transaction."""
    with connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cursor.execute(f"SET LOCAL statement_timeout = '{STATEMENT_TIMEOUT}'")


def verify_or_build_indexes(connection: Connection, migration: str) -> list[str]:
    """The body of 0076, 0078 and 0080; runs inside the migration's transaction.

    Every index of `migration` must exist with its exact definition and be valid, ready and
    live. A missing or broken one is built here, under the short budgets, only when its table is
    empty; on a populated table the migration refuses (SchemaNotReady) and names the concurrent
    build, which must run outside any transaction. Returns the indexes it built.
    """
    set_migration_budgets(connection)
    specs = indexes_of(migration)
    to_build: list[IndexCheck] = []
    refused: list[IndexCheck] = []
    for spec in specs:
        check = inspect_index(connection, spec)
        if check.ok:
            continue
        if check.table_exists and not check.missing_columns and not table_has_rows(
            connection, spec.table
        ):
            to_build.append(check)
        else:
            refused.append(check)
    if refused:
        raise SchemaNotReady(_refusal(migration, refused), migration=migration, indexes=refused)
    with connection.cursor() as cursor:
        for check in to_build:
            if check.exists:
                cursor.execute(check.spec.drop_sql(concurrently=False))
            cursor.execute(check.spec.create_sql(concurrently=False))
    return [check.name for check in to_build]


def _refusal(migration: str, refused: Sequence[IndexCheck]) -> str:
    lines = [
        f"{APP_LABEL}.{migration} refused: "
        + ", ".join(f"{c.name} is {c.state}" for c in refused)
        + ". On a populated table an index is built concurrently, outside a transaction, "
        f"before this migration: run `{BUILD_COMMAND}`, then `{MIGRATE_COMMAND}` again."
    ]
    lines += [f"  {c.name}: {c.problem}; fix: {c.fix}" for c in refused]
    return "\n".join(lines)


def drop_indexes(connection: Connection, migration: str) -> None:
    """Reverse of 0076, 0078 and 0080: drop the migration's indexes (a catalog change, under
    budgets)."""
    set_migration_budgets(connection)
    with connection.cursor() as cursor:
        for spec in indexes_of(migration):
            cursor.execute(spec.drop_sql(concurrently=False))


def apply_sync_columns(connection: Connection) -> list[str]:
    """The body of 0077; runs inside the migration's transaction, under the short budgets.

    Adds each missing column with a constant default (the epoch for the stamps: PostgreSQL keeps
    it in the catalog, so no row is rewritten and nothing is backfilled), then sets the stamps'
    defaults to `now()`. Where a column already has the expected shape it issues no statement
    at all, so re-applying after a by-hand application changes nothing, not even a catalog row.
    A column with the wrong type or nullability is refused: fixing it would rewrite or scan the
    table. Returns the statements it executed.
    """
    set_migration_budgets(connection)
    checks = inspect_columns(connection)
    wrong = [c for c in checks if c.exists and not c.shape_ok]
    if wrong:
        raise SchemaNotReady(
            f"{APP_LABEL}.{MIGRATION_0077} refused: "
            + "; ".join(f"{c.label} {c.problem}" for c in wrong)
            + ". Repair these columns by hand; 0077 never rewrites or scans a table.",
            migration=MIGRATION_0077,
            columns=wrong,
        )
    executed = [c.spec.add_sql() for c in checks if not c.exists]
    executed += [c.spec.default_sql() for c in checks if c.found_default != c.spec.default]
    with connection.cursor() as cursor:
        for sql in executed:
            cursor.execute(sql)
    return executed


def drop_sync_columns(connection: Connection) -> None:
    """Reverse of 0077: DROP COLUMN only marks the columns dropped in the catalog (no rewrite)."""
    set_migration_budgets(connection)
    with connection.cursor() as cursor:
        for spec in reversed(COLUMNS):
            cursor.execute(spec.drop_sql())
