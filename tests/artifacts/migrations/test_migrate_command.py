"""`buzz-admin migrate` on empty databases: the advisory lock, reversing, fresh installs."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from artifacts.schema import MIGRATION_0076, MIGRATION_0077, MIGRATION_0078
from buzzrelay import VERSION
from buzzrelay.admin_commands._pg import MIGRATION_LOCK_KEY
from tests.artifacts.migrations.scratch import (
    Scratch,
    base_name,
    scratch_database,
    short_id,
    wait_until,
)

SYNC = {MIGRATION_0076, MIGRATION_0077, MIGRATION_0078}


@pytest.fixture
def db(request: pytest.FixtureRequest) -> Iterator[Scratch]:
    with scratch_database(f"{base_name()}_migcmd_{short_id(request.node.nodeid)}") as scratch:
        yield scratch


def test_fresh_database_needs_no_separate_index_builds(db: Scratch) -> None:
    result = db.buzz_admin("migrate")
    assert result.returncode == 0, result.stdout + result.stderr
    assert db.ledger() >= SYNC
    check = db.buzz_admin("check")
    assert check.returncode == 0, check.stdout
    assert "all 13 checks pass" in check.stdout


def test_check_fails_on_an_empty_database_and_names_the_fixes(db: Scratch) -> None:
    check = db.buzz_admin("check")
    assert check.returncode == 1
    assert "check: 13 of 13 checks fail" in check.stdout
    assert "run `buzz-admin migrate`" in check.stdout


def _advisory_waiters(db: Scratch) -> int:
    return int(db.value(
        """
        SELECT count(*) FROM pg_locks
        WHERE locktype = 'advisory' AND NOT granted AND classid = %s AND objid = %s
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
        """,
        [MIGRATION_LOCK_KEY >> 32, MIGRATION_LOCK_KEY & 0xFFFFFFFF],
    ))


def test_two_concurrent_migrate_runs_do_not_interleave(db: Scratch) -> None:
    # Hold the lock ourselves so both runs are certainly waiting at the same time, then let go.
    with db.connect() as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", [MIGRATION_LOCK_KEY])
        runs = [db.start_buzz_admin("migrate") for _ in range(2)]
        wait_until(lambda: _advisory_waiters(db) == 2, timeout=60, what="both runs to wait")
        waiting = db.sql("SELECT application_name FROM pg_stat_activity WHERE pid <> %s "
                         "AND pid <> pg_backend_pid() AND datname = current_database()",
                         [holder.info.backend_pid])
        assert sorted(waiting) == [(f"buzz-admin/{VERSION} migration lock",)] * 2
        holder.execute("SELECT pg_advisory_unlock(%s)", [MIGRATION_LOCK_KEY])
        # While they run, buzz-admin never announces itself as a relay (readiness item 4).
        seen: set[str] = set()
        while any(run.poll() is None for run in runs):
            seen |= {name for (name,) in holder.execute(
                "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
            ).fetchall()}
            time.sleep(0.02)
        outputs = [run.communicate(timeout=240) for run in runs]
    assert f"buzz-admin/{VERSION} migrate" in seen
    assert not [name for name in seen if name.startswith("buzzrelay/")]
    for run, (out, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, out + err
        assert "waiting for the migration lock" in out
    applied = [out.count("Applying ") for out, _ in outputs]
    # One run applied everything; the other, serialized behind it, found nothing left to do.
    assert sorted(applied)[0] == 0 and sorted(applied)[1] > 10
    assert "No migrations to apply." in outputs[applied.index(0)][0]
    rows = db.sql("SELECT app, name, count(*) FROM django_migrations GROUP BY 1, 2 "
                  "HAVING count(*) > 1")
    assert rows == []


def test_reverse_migrations_return_to_the_schema_before_incremental_reads(db: Scratch) -> None:
    assert db.buzz_admin("migrate").returncode == 0
    back = db.buzz_admin("migrate", "artifacts", "0001")
    assert back.returncode == 0, back.stdout + back.stderr
    assert not SYNC & db.ledger()
    assert db.value(
        "SELECT count(*) FROM information_schema.columns WHERE column_name IN "
        "('modified_at', 'sync_modified_at', 'artifact_policy_modified_at', 'source_channel_id')"
    ) == 0
    assert db.value(
        "SELECT count(*) FROM pg_class WHERE relname IN ('idx_artifact_revisions_artifact', "
        "'artifact_heads_modified', 'artifact_heads_channel', 'channel_members_sync', "
        "'artifact_revisions_moves')"
    ) == 0
    again = db.buzz_admin("migrate")
    assert again.returncode == 0, again.stdout + again.stderr
    assert db.buzz_admin("check").returncode == 0


def test_a_bad_target_is_one_line(db: Scratch) -> None:
    result = db.buzz_admin("migrate", "artifacts", "9999")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "buzz-admin migrate: Cannot find a migration matching '9999' from app 'artifacts'."
    ]
