"""Upgrading a populated database through 0076-0078 with buzz-admin, as the runbook describes.

Each test clones a template database at artifacts 0001 holding 200k revisions and 100k heads,
then drives `buzz-admin` as a subprocess against it, like an operator would.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from artifacts.schema import EPOCH, INDEXES, MIGRATION_0076, MIGRATION_0077, MIGRATION_0078
from tests.artifacts.migrations.scratch import (
    Scratch,
    base_name,
    catalog_snapshot,
    populated_template,
    relfilenodes,
    scratch_database,
    short_id,
)

pytestmark = pytest.mark.slow

MIGRATION_0079 = "0079_community_relay_information"
SYNC_TABLES = ["artifact_heads", "artifact_revisions", "channel_members", "communities"]
REVISIONS, HEADS = 200_000, 100_000


@pytest.fixture(scope="module")
def template() -> Scratch:
    return populated_template()


@pytest.fixture
def db(template: Scratch, request: pytest.FixtureRequest) -> Iterator[Scratch]:
    name = f"{base_name()}_upgrade_{short_id(request.node.nodeid)}"
    with scratch_database(name, template=template.name) as scratch:
        yield scratch


def test_migrate_stops_before_0076_until_the_lookup_index_is_built(db: Scratch) -> None:
    result = db.buzz_admin("migrate")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "build-indexes" in result.stderr
    assert f"stopped before artifacts.{MIGRATION_0076}" in result.stderr
    assert ("CREATE INDEX CONCURRENTLY idx_artifact_revisions_artifact ON artifact_revisions "
            "(community_id, artifact_id)") in " ".join(result.stdout.split())
    assert MIGRATION_0076 not in db.ledger()
    assert db.value("SELECT to_regclass('idx_artifact_revisions_artifact')") is None
    # Nothing of 0077 ran: the run stopped before the migration whose index is missing.
    assert db.value(
        "SELECT count(*) FROM information_schema.columns WHERE column_name = 'modified_at'"
    ) == 0


def test_runbook_upgrades_a_populated_database_without_rewriting_it(db: Scratch) -> None:
    files_before = relfilenodes(db)

    prebuild = db.buzz_admin("build-indexes")
    assert prebuild.returncode == 0, prebuild.stdout + prebuild.stderr
    assert "waiting for 0077" in prebuild.stdout

    # 0076 verifies the prebuilt index, 0077 adds the columns, 0078 refuses: its indexes are
    # missing on populated tables.
    first = db.buzz_admin("migrate")
    assert first.returncode == 3, first.stdout + first.stderr
    assert f"stopped before artifacts.{MIGRATION_0078}" in first.stderr
    assert "build-indexes" in first.stderr
    assert {MIGRATION_0076, MIGRATION_0077} <= db.ledger()
    assert MIGRATION_0078 not in db.ledger()
    for name in ("artifact_heads_modified", "channel_members_sync", "artifact_revisions_moves"):
        assert name in first.stdout

    # No table was rewritten, and old rows read the epoch without any backfill.
    assert relfilenodes(db) == files_before
    assert db.value(
        "SELECT count(*) FROM artifact_heads WHERE modified_at <> %s::timestamptz", [EPOCH]
    ) == 0
    assert db.value(
        "SELECT count(*) FROM artifact_revisions WHERE modified_at = %s::timestamptz", [EPOCH]
    ) == REVISIONS
    assert db.value("SELECT count(*) FROM artifact_revisions WHERE source_channel_id IS NULL") \
        == REVISIONS
    defaults = db.sql(
        """
        SELECT c.relname, a.attname, pg_get_expr(d.adbin, d.adrelid)
        FROM pg_attrdef d
        JOIN pg_class c ON c.oid = d.adrelid
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE a.attname IN ('modified_at', 'sync_modified_at', 'artifact_policy_modified_at')
        ORDER BY 1, 2
        """
    )
    assert defaults == [
        ("artifact_heads", "modified_at", "now()"),
        ("artifact_revisions", "modified_at", "now()"),
        ("channel_members", "sync_modified_at", "now()"),
        ("communities", "artifact_policy_modified_at", "now()"),
    ]
    # A new row gets its transaction's now(), not the epoch.
    with db.connect() as conn, conn.transaction():
        row = conn.execute(
            """
            INSERT INTO artifact_heads (community_id, artifact_id, event_id, channel_id,
                                        artifact_type, deleted, created_at)
            SELECT id, gen_random_uuid(), repeat('a', 64), gen_random_uuid(), 'buzz.note',
                   false, 1 FROM communities
            RETURNING modified_at, now()
            """
        ).fetchone()
        assert row is not None and row[0] == row[1]

    build = db.buzz_admin("build-indexes")
    assert build.returncode == 0, build.stdout + build.stderr
    second = db.buzz_admin("migrate")
    assert second.returncode == 0, second.stdout + second.stderr
    assert {MIGRATION_0076, MIGRATION_0077, MIGRATION_0078} <= db.ledger()
    assert relfilenodes(db) == files_before

    check = db.buzz_admin("check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "all 13 checks pass" in check.stdout


def test_migrate_with_build_indexes_runs_the_whole_runbook(db: Scratch) -> None:
    files_before = relfilenodes(db)
    result = db.buzz_admin("migrate", "--build-indexes")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every check passes" in result.stdout
    assert relfilenodes(db) == files_before
    assert db.buzz_admin("check").returncode == 0


def _break_index_with_a_cancelled_build(db: Scratch, name: str) -> None:
    """Leave `name` invalid the way it happens in production: a concurrent build cancelled
    midway (here by a statement timeout while it waits for a writer's open transaction)."""
    spec = next(spec for spec in INDEXES if spec.name == name)
    with db.connect() as writer, db.connect() as builder:
        writer.execute("BEGIN")
        writer.execute(f"LOCK TABLE {spec.table} IN ROW EXCLUSIVE MODE")
        builder.execute("SET statement_timeout = '1s'")
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            builder.execute(spec.create_sql(concurrently=True))
        writer.execute("ROLLBACK")
    assert db.value("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)",
                    [name]) is False


def test_an_invalid_index_is_detected_reported_and_repaired(db: Scratch) -> None:
    assert db.buzz_admin("build-indexes").returncode == 0
    assert db.buzz_admin("migrate").returncode == 3  # stops before 0078
    built = db.buzz_admin("build-indexes", "--index", "artifact_heads_channel",
                          "--index", "channel_members_sync", "--index", "artifact_revisions_moves")
    assert built.returncode == 0, built.stdout + built.stderr
    _break_index_with_a_cancelled_build(db, "artifact_heads_modified")

    check = db.buzz_admin("check")
    assert check.returncode == 1
    flat = " ".join(check.stdout.split())
    assert "artifact_heads_modified artifact_heads exact NOT-valid" in flat
    assert "INVALID" in flat
    assert "DROP INDEX CONCURRENTLY IF EXISTS artifact_heads_modified;" in flat

    refused = db.buzz_admin("migrate")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "invalid" in refused.stdout
    assert "DROP INDEX CONCURRENTLY IF EXISTS artifact_heads_modified" in " ".join(
        refused.stdout.split())
    assert MIGRATION_0078 not in db.ledger()

    repaired = db.buzz_admin("build-indexes")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "dropped the old index and rebuilt it" in repaired.stderr
    assert "rebuilt" in repaired.stdout
    assert db.buzz_admin("migrate").returncode == 0
    assert db.buzz_admin("check").returncode == 0


def _apply_runbook_by_hand(db: Scratch) -> None:
    """The runbook's SQL, run directly: concurrent builds outside transactions, 0076, 0078 and
    0080 (verification only) skipped, 0077 in one transaction. Nothing reaches the ledger."""
    from artifacts.schema import REPLAY_INDEX, sync_columns_sql

    with db.connect() as conn:
        conn.execute(INDEXES[0].create_sql(concurrently=True))
        with conn.transaction():
            for statement in sync_columns_sql():
                conn.execute(statement)
        for spec in (*INDEXES[1:], REPLAY_INDEX):
            conn.execute(spec.create_sql(concurrently=True))


def test_migrate_after_a_direct_sql_application_records_the_ledger(db: Scratch) -> None:
    _apply_runbook_by_hand(db)
    assert not db.ledger() & {MIGRATION_0076, MIGRATION_0077, MIGRATION_0078}
    assert db.buzz_admin("check").returncode == 1  # ledger items fail, all else passes
    catalog = catalog_snapshot(db)

    # Up to 0078: the later 0079 adds columns of its own to `communities`.
    result = db.buzz_admin("migrate", "artifacts", MIGRATION_0078)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in (MIGRATION_0076, MIGRATION_0077, MIGRATION_0078):
        assert f"Applying artifacts.{name}... OK" in result.stdout
    assert {MIGRATION_0076, MIGRATION_0077, MIGRATION_0078} <= db.ledger()
    # Re-applying 0077 changed nothing: not a table file, not a column, not a catalog row.
    assert catalog_snapshot(db) == catalog
    assert db.buzz_admin("check").returncode == 0
    assert db.buzz_admin("migrate").returncode == 0


def test_0077_applied_twice_changes_nothing(db: Scratch) -> None:
    from artifacts.migrations._sync_steps import apply_sync_columns

    with db.connect() as conn:
        with conn.transaction():
            first = apply_sync_columns(conn)
        assert len(first) == 9  # five ADD COLUMN, four SET DEFAULT
        snapshot = catalog_snapshot(db)
        with conn.transaction():
            assert apply_sync_columns(conn) == []
    assert catalog_snapshot(db) == snapshot
    # The by-hand script is idempotent too (it re-stores the defaults, nothing else).
    files = relfilenodes(db)
    from artifacts.schema import sync_columns_sql

    with db.connect() as conn, conn.transaction():
        for statement in sync_columns_sql():
            conn.execute(statement)
    assert relfilenodes(db) == files
    assert db.value("SELECT count(*) FROM artifact_heads WHERE modified_at = %s::timestamptz",
                    [EPOCH]) == HEADS


def test_0077_gives_up_within_its_lock_budget_and_changes_nothing(db: Scratch) -> None:
    assert db.buzz_admin("build-indexes").returncode == 0
    with db.connect() as reader:
        # A long reader of channel_members: 0077 alters artifact_heads first, then waits here.
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM channel_members")
        result = db.buzz_admin("migrate", "--lock-retries", "0")
        reader.execute("ROLLBACK")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "lock timeout" in result.stderr
    assert MIGRATION_0077 not in db.ledger()
    # One transaction: the column already added to artifact_heads was rolled back with it.
    assert db.value(
        "SELECT count(*) FROM information_schema.columns WHERE table_name = 'artifact_heads' "
        "AND column_name = 'modified_at'"
    ) == 0
    retried = db.buzz_admin("migrate", "--build-indexes")
    assert retried.returncode == 0, retried.stdout + retried.stderr


def test_0079_adds_the_relay_information_without_rewriting_and_old_writers_still_insert(
    db: Scratch,
) -> None:
    files_before = relfilenodes(db)
    result = db.buzz_admin("migrate", "--build-indexes")
    assert result.returncode == 0, result.stdout + result.stderr
    assert MIGRATION_0079 in db.ledger()
    assert relfilenodes(db) == files_before  # communities was not rewritten
    # The existing community reads the defaults, without a backfill.
    assert db.sql("SELECT description, contact, icon, max_content_length FROM communities") == [
        ("", "", "", None)
    ]
    # A relay of the previous release inserts without the new columns: the database's
    # defaults fill them (a NOT NULL column without one would refuse the row).
    db.sql(
        "INSERT INTO communities (host, name, admin_pubkeys, artifacts_enabled,"
        " open_channel_creation, listing_version, created_at)"
        " VALUES ('old.example', 'Old', '{}', true, false, 0, now())"
    )
    assert db.value("SELECT posting_policy FROM communities WHERE host = 'old.example'") == ""
    back = db.buzz_admin("migrate", "artifacts", MIGRATION_0078)
    assert back.returncode == 0, back.stdout + back.stderr
    assert MIGRATION_0079 not in db.ledger()
    assert db.value(
        "SELECT count(*) FROM information_schema.columns WHERE table_name = 'communities'"
        " AND column_name IN ('description', 'contact', 'max_content_length')"
    ) == 0
