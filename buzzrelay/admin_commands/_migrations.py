"""The runbook as one function: migrations under the advisory lock, with index builds between.

`buzz-admin migrate`, `manage.py migrate` (which the test suite's database creation also runs)
and the quickstart call `run_migrate`. Django's own migrate command applies the migrations (all
apps, in dependency order, signals included: called as its class, since `migrate` by name is
this runbook); 0076 and 0078 verify their
indexes and refuse on a populated table while one is missing (SchemaNotReady), which stops the
run before that migration with exit 3. After a direct SQL application of the runbook, which
leaves the ledger without 0076-0078, a plain run verifies and records 0076, re-applies the
idempotent 0077 (no statement is issued when the columns are already right) and verifies and
records 0078.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

import psycopg

from artifacts.schema import (
    APP_LABEL,
    BUILT_INDEXES,
    MIGRATION_0077,
    SchemaNotReady,
    inspect_schema,
)
from buzzrelay.admin_commands._indexes import Progress, build_indexes
from buzzrelay.admin_commands._pg import (
    describe_error,
    django_connection_named,
    migration_lock,
    sqlstate,
)
from buzzrelay.admin_commands._tables import print_table

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INDEX_NEEDED = 3

# lock_not_available (lock_timeout) and deadlock_detected: the migration's transaction was rolled
# back whole, so running it again is safe.
RETRYABLE = {"55P03", "40P01"}
RETRY_DELAY_SECONDS = 3.0


def apply_migrations(
    *,
    app_label: str | None = None,
    migration_name: str | None = None,
    fake_initial: bool = False,
    lock_retries: int = 3,
    django_options: Mapping[str, Any] | None = None,
    out: TextIO,
    err: TextIO = sys.stderr,
) -> None:
    """Django's migrate (to a target when given); a lock-budget failure is retried.

    `django_options` are more of Django's migrate options (`manage.py migrate --plan`, the test
    database's `run_syncdb`, a verbosity ...), passed on as they are.
    """
    from django.core.management import call_command
    from django.core.management.commands.migrate import Command as DjangoMigrate
    from django.db import OperationalError, connection

    args = [value for value in (app_label, migration_name) if value]
    options: dict[str, Any] = {"interactive": False, "verbosity": 1, **(django_options or {})}
    for attempt in range(lock_retries + 1):
        try:
            call_command(
                DjangoMigrate(), *args, fake_initial=fake_initial, stdout=out, stderr=err,
                **options,
            )
            return
        except OperationalError as exc:
            if sqlstate(exc) not in RETRYABLE or attempt == lock_retries:
                raise
            out.write(
                f"\n  {describe_error(exc)}: another transaction holds a lock this migration "
                f"needs; its transaction was rolled back. Retrying in {RETRY_DELAY_SECONDS:.0f} s "
                f"({attempt + 1}/{lock_retries})\n"
            )
            out.flush()
            connection.close()
            time.sleep(RETRY_DELAY_SECONDS)


def _ledger_has(name: str) -> bool:
    from django.db import connection
    from django.db.migrations.recorder import MigrationRecorder

    return (APP_LABEL, name) in MigrationRecorder(connection).applied_migrations()


def _any_index_table() -> bool:
    from django.db import connection

    tables = set(connection.introspection.table_names())
    return any(spec.table in tables for spec in BUILT_INDEXES)


def _print_builds(progress: Progress, out: TextIO, title: str) -> bool:
    out.write(f"{title}\n")
    out.flush()
    outcomes = build_indexes(progress=progress)
    return all(outcome.ok for outcome in outcomes)


def run_migrate(
    *,
    app_label: str | None = None,
    migration_name: str | None = None,
    with_index_builds: bool = False,
    fake_initial: bool = False,
    lock_retries: int = 3,
    django_options: Mapping[str, Any] | None = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """The whole of `buzz-admin migrate [--build-indexes]`; returns the exit code.

    At `verbosity` 0 (in `django_options`) only failures are written.
    """
    with django_connection_named("migrate"):
        return _migrate_named(
            app_label=app_label, migration_name=migration_name,
            with_index_builds=with_index_builds, fake_initial=fake_initial,
            lock_retries=lock_retries, django_options=dict(django_options or {}), out=out,
            err=err,
        )


def _migrate_named(
    *,
    app_label: str | None,
    migration_name: str | None,
    with_index_builds: bool,
    fake_initial: bool,
    lock_retries: int,
    django_options: dict[str, Any],
    out: TextIO,
    err: TextIO,
) -> int:
    from django.core.management import CommandError
    from django.db import DatabaseError, connection

    quiet = django_options.get("verbosity", 1) == 0
    progress = Progress(err)
    try:
        with migration_lock(out):
            if with_index_builds:
                # Runbook: prebuild idx_artifact_revisions_artifact (the four others wait for
                # 0077's columns), 0076 and 0077, the four concurrent builds, then 0078.
                # A fresh database has no table to prebuild on: 0001 creates them, empty, and
                # the builds after 0077 make every index (a quickstart printed one "no table"
                # line per index here).
                if _any_index_table() and not _print_builds(
                    progress, out, "Building indexes concurrently (prebuild):"
                ):
                    return _builds_failed(err)
                if not _ledger_has(MIGRATION_0077):
                    apply_migrations(app_label=APP_LABEL, migration_name=MIGRATION_0077,
                                     fake_initial=fake_initial, lock_retries=lock_retries,
                                     django_options=django_options, out=out, err=err)
                if not _print_builds(progress, out, "Building indexes concurrently:"):
                    return _builds_failed(err)
            apply_migrations(app_label=app_label, migration_name=migration_name,
                             fake_initial=fake_initial, lock_retries=lock_retries,
                             django_options=django_options, out=out, err=err)
    except SchemaNotReady as exc:
        return _stopped(exc, out, err)
    except (DatabaseError, psycopg.Error) as exc:
        out.write("\n")
        out.flush()
        err.write(f"buzz-admin migrate: {describe_error(exc)}\n")
        return EXIT_FAILED
    except CommandError as exc:
        err.write(f"buzz-admin migrate: {exc}\n")
        return EXIT_FAILED
    if quiet:
        return EXIT_OK
    report = inspect_schema(connection)
    if report.ok:
        out.write("Sync schema (PROTOCOL.md section 7 items 1-3): every check passes.\n")
    else:
        out.write("Sync schema not complete yet (`buzz-admin check` shows all):\n")
        out.writelines(f"  {line}\n" for line in report.problems)
    return EXIT_OK


def _builds_failed(err: TextIO) -> int:
    err.write("buzz-admin migrate: an index build failed (see above); nothing more was applied\n")
    return EXIT_FAILED


def _stopped(exc: SchemaNotReady, out: TextIO, err: TextIO) -> int:
    out.write("\n")
    if exc.indexes:
        print_table(
            ["index", "table", "state", "fix"],
            [[c.name, c.spec.table, c.state, c.fix] for c in exc.indexes],
            title=f"Stopped before {APP_LABEL}.{exc.migration}:",
            wrap=72,
            file=out,
        )
    if exc.columns:
        print_table(
            ["column", "expected", "found", "fix"],
            [[c.label, c.expected, c.found, c.fix] for c in exc.columns],
            title=f"Stopped before {APP_LABEL}.{exc.migration}:",
            wrap=60,
            file=out,
        )
    if exc.indexes:
        err.write(
            f"buzz-admin migrate: stopped before {APP_LABEL}.{exc.migration}: an index is missing "
            "or invalid on a populated table; run `buzz-admin build-indexes` (or "
            "`buzz-admin migrate --build-indexes`), then `buzz-admin migrate` again\n"
        )
        return EXIT_INDEX_NEEDED
    err.write(f"buzz-admin migrate: stopped before {APP_LABEL}.{exc.migration}: "
              "a column needs repair by hand (see above)\n")
    return EXIT_FAILED
