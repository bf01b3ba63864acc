"""artifacts.schema against the migrated test database: checks, problems, fixes, repairs.

Every change a test makes (a dropped index, an altered default) is DDL inside the test's
transaction, which pytest-django rolls back.
"""

from __future__ import annotations

import pytest
from django.db import connection

from artifacts.migrations._sync_steps import apply_sync_columns, verify_or_build_indexes
from artifacts.models import ArtifactHead, Community
from artifacts.schema import (
    COLUMNS,
    INDEXES,
    MIGRATION_0077,
    MIGRATION_0078,
    SchemaNotReady,
    inspect_columns,
    inspect_index,
    inspect_schema,
    ledger_rows,
    normalize_indexdef,
)


def execute(sql: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql)


def test_normal_form_ignores_schema_quotes_case_and_spacing() -> None:
    found = ('CREATE INDEX "artifact_revisions_moves" ON public.artifact_revisions USING btree '
             "(community_id, modified_at, event_id) WHERE (source_channel_id IS NOT NULL)")
    assert normalize_indexdef(found) == INDEXES[4].definition
    assert normalize_indexdef("CREATE  INDEX x ON Other.T USING btree (a)") == (
        "create index x on t using btree (a)"
    )
    unique = "CREATE UNIQUE INDEX artifact_heads_channel ON public.artifact_heads USING btree " \
             "(community_id, channel_id, artifact_id)"
    assert normalize_indexdef(unique) != INDEXES[2].definition


@pytest.mark.django_db
def test_the_migrated_database_passes_items_1_to_3() -> None:
    report = inspect_schema(connection)
    assert report.ok, report.problems
    assert report.problems == []
    assert [row.ok for row in report.ledger] == [True, True, True]
    for check in report.columns:
        assert check.found == check.expected and check.fix == ""
    assert report.columns[0].found == (
        "timestamp with time zone NOT NULL DEFAULT now()"
    )
    for index in report.indexes:
        assert index.state == "ok" and index.flags == "valid ready live"


@pytest.mark.django_db
def test_an_unrecorded_migration_fails_item_1() -> None:
    execute(f"DELETE FROM django_migrations WHERE app = 'artifacts' AND name = '{MIGRATION_0078}'")
    rows = {row.name: row for row in ledger_rows(connection)}
    assert not rows[MIGRATION_0078].ok
    assert rows[MIGRATION_0078].fix == "run `buzz-admin migrate` (records it after verifying)"
    assert inspect_schema(connection).problems == [
        f"artifacts.{MIGRATION_0078}: not recorded in the migration ledger"
    ]


@pytest.mark.django_db
def test_a_changed_default_is_reported_and_0077_restores_only_it() -> None:
    execute("ALTER TABLE artifact_heads ALTER COLUMN modified_at SET DEFAULT statement_timestamp()")
    check = inspect_columns(connection)[0]
    assert not check.ok
    assert check.problem == "default is statement_timestamp(), expected now()"
    assert "buzz-admin migrate" in check.fix
    assert apply_sync_columns(connection) == [
        "ALTER TABLE artifact_heads ALTER COLUMN modified_at SET DEFAULT now()"
    ]
    assert inspect_schema(connection).ok


@pytest.mark.django_db
def test_a_column_of_the_wrong_shape_makes_0077_refuse() -> None:
    execute("ALTER TABLE channel_members ALTER COLUMN sync_modified_at DROP NOT NULL")
    check = inspect_columns(connection)[3]
    assert check.problem == (
        "is timestamp with time zone NULL DEFAULT now(), "
        "expected timestamp with time zone NOT NULL DEFAULT now()"
    )
    assert check.fix.startswith("repair by hand")
    with pytest.raises(SchemaNotReady) as refused:
        apply_sync_columns(connection)
    assert refused.value.migration == MIGRATION_0077
    assert [c.label for c in refused.value.columns] == ["channel_members.sync_modified_at"]


@pytest.mark.django_db
def test_0078_builds_a_missing_index_on_an_empty_table_and_refuses_a_populated_one() -> None:
    spec = INDEXES[2]  # artifact_heads_channel
    execute(f"DROP INDEX {spec.name}")
    missing = inspect_index(connection, spec)
    assert missing.state == "missing"
    assert missing.fix == (
        "run `buzz-admin build-indexes`, or outside a transaction: CREATE INDEX CONCURRENTLY "
        "artifact_heads_channel ON artifact_heads (community_id, channel_id, artifact_id);"
    )
    assert verify_or_build_indexes(connection, MIGRATION_0078) == [spec.name]
    assert inspect_index(connection, spec).ok

    execute(f"DROP INDEX {spec.name}")
    community = Community.objects.create(host="schema.example", name="Schema")
    ArtifactHead.objects.create(
        community=community, artifact_id="5d6f2a9e-3c1b-4e7a-9f00-000000000001",
        event_id="e" * 64, channel_id="5d6f2a9e-3c1b-4e7a-9f00-000000000002",
        artifact_type="buzz.task", created_at=1,
    )
    with pytest.raises(SchemaNotReady) as refused:
        verify_or_build_indexes(connection, MIGRATION_0078)
    message = str(refused.value)
    assert message.startswith(f"artifacts.{MIGRATION_0078} refused: artifact_heads_channel is "
                              "missing.")
    assert "run `buzz-admin build-indexes`, then `buzz-admin migrate` again" in message
    assert [c.name for c in refused.value.indexes] == [spec.name]


@pytest.mark.django_db
def test_columns_and_indexes_a_migration_has_not_made_yet() -> None:
    execute("DROP INDEX artifact_revisions_moves")
    execute("ALTER TABLE artifact_revisions DROP COLUMN source_channel_id")
    index = inspect_index(connection, INDEXES[4])
    assert index.state == "waiting for 0077"
    assert index.missing_columns == ("source_channel_id",)
    column = inspect_columns(connection)[2]
    assert column.spec is COLUMNS[2]
    assert (column.exists, column.found, column.problem) == (False, None, "missing")
