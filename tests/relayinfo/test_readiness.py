"""Readiness items 1-3, 5 and 6 against the live test database (item 4: test_fleet.py).

Each test breaks one thing for real (drops an index, deletes a ledger row, changes a default,
connects as a role that cannot see other sessions), checks that the verdict and NIP-11 follow,
then repairs it and checks that the capability comes back.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test import override_settings

from artifacts.models import Community
from artifacts.schema import COLUMNS, INDEXES, INDEXES_BY_NAME, SYNC_MIGRATIONS
from relayinfo.readiness import inspect_deployment, parse_application_name
from tests.relayinfo.conftest import advertised, connect, execute, fresh, transactional

pytestmark = transactional


def test_migrated_database_passes_every_item(community: Community) -> None:
    report = fresh()
    assert [check.item for check in report.checks] == [1, 2, 3, 4, 5, 6]
    assert report.ready, [(c.id, c.found) for c in report.failing]
    assert report.schema is not None and report.schema.ok
    assert advertised()


@pytest.mark.parametrize("name", [spec.name for spec in INDEXES])
def test_dropped_index_withdraws_the_capability_until_rebuilt(
    community: Community, name: str
) -> None:
    spec = INDEXES_BY_NAME[name]
    execute(spec.drop_sql(concurrently=False))
    try:
        report = fresh()
        check = report.item(3)
        assert not check.passed and not report.ready
        assert name in check.found and "build-indexes" in check.fix
        assert [c.item for c in report.failing] == [3]
        assert not advertised()
    finally:
        execute(spec.create_sql(concurrently=False))
    assert fresh().ready
    assert advertised()


def test_index_with_another_definition_fails(community: Community) -> None:
    spec = INDEXES_BY_NAME["artifact_heads_channel"]
    execute(spec.drop_sql(concurrently=False))
    execute("CREATE INDEX artifact_heads_channel ON artifact_heads (community_id, channel_id)")
    try:
        check = fresh().item(3)
        assert not check.passed
        assert "artifact_heads_channel" in check.found
        assert not advertised()
    finally:
        execute(spec.drop_sql(concurrently=False))
        execute(spec.create_sql(concurrently=False))
    assert advertised()


@pytest.mark.parametrize("name", SYNC_MIGRATIONS)
def test_missing_ledger_row_withdraws_the_capability(community: Community, name: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM django_migrations WHERE app = 'artifacts' AND name = %s RETURNING applied",
            [name],
        )
        (applied,) = cursor.fetchone()
    try:
        report = fresh()
        assert [c.item for c in report.failing] == [1]
        assert name in report.item(1).found and "buzz-admin migrate" in report.item(1).fix
        assert not advertised()
    finally:
        execute(
            "INSERT INTO django_migrations (app, name, applied) VALUES ('artifacts', %s, %s)",
            [name, applied],
        )
    assert advertised()


@pytest.mark.parametrize("spec", COLUMNS, ids=lambda spec: spec.label)
def test_wrong_column_default_withdraws_the_capability(community: Community, spec: object) -> None:
    from artifacts.schema import ColumnSpec

    assert isinstance(spec, ColumnSpec)
    wrong = "statement_timestamp()" if spec.default == "now()" else "gen_random_uuid()"
    execute(f"ALTER TABLE {spec.table} ALTER COLUMN {spec.column} SET DEFAULT {wrong}")
    try:
        report = fresh()
        check = report.item(2)
        assert [c.item for c in report.failing] == [2]
        assert spec.label in check.found and wrong in check.found
        assert not advertised()
    finally:
        execute(spec.default_sql())
    assert advertised()


def test_wrong_nullability_withdraws_the_capability(community: Community) -> None:
    execute("ALTER TABLE channel_members ALTER COLUMN sync_modified_at DROP NOT NULL")
    try:
        check = fresh().item(2)
        assert not check.passed and "channel_members.sync_modified_at" in check.found
        assert not advertised()
    finally:
        execute("ALTER TABLE channel_members ALTER COLUMN sync_modified_at SET NOT NULL")
    assert advertised()


@pytest.fixture
def role_without_stats() -> Iterator[str]:
    """A login role that is neither superuser nor member of pg_read_all_stats (cluster-wide)."""
    name = f"buzz_ready_nostats_{uuid.uuid4().hex[:8]}"
    execute(f"CREATE ROLE {name} LOGIN")
    # What a serving role holds on the relay's tables (the privileges are not the point here).
    execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {name}")
    try:
        yield name
    finally:
        execute(f"DROP OWNED BY {name}")
        execute(f"DROP ROLE {name}")


def test_serving_role_without_read_all_stats_withdraws_the_capability(
    community: Community, role_without_stats: str
) -> None:
    # An instance serving under that role: its fence cannot see other roles' transactions.
    with connect(application_name=settings.RELAY_APPLICATION_NAME, user=role_without_stats):
        report = fresh()
        check = report.item(6)
        assert [c.item for c in report.failing] == [6]
        assert role_without_stats in check.found
        assert f"GRANT pg_read_all_stats TO {role_without_stats};" in check.fix
        assert not advertised()
        execute(f"GRANT pg_read_all_stats TO {role_without_stats}")
        assert fresh().item(6).passed
        execute(f"REVOKE pg_read_all_stats FROM {role_without_stats}")
        assert not fresh().item(6).passed
    # That instance left.
    from tests.relayinfo.conftest import wait_for

    assert wait_for(lambda: fresh().item(6).passed)
    assert advertised()


def test_evaluation_as_a_role_without_read_all_stats_fails_item_6(
    community: Community, role_without_stats: str
) -> None:
    with connect(
        application_name="buzz-admin test", user=role_without_stats
    ) as conn:
        report = inspect_deployment(conn, local_key_generated=False)
    assert not report.item(6).passed
    assert role_without_stats in report.item(6).found
    # Every other item reads what every role may read.
    assert [c.item for c in report.failing] == [6]


def test_fence_check_reports_prepared_transactions_setting(community: Community) -> None:
    assert "max_prepared_transactions = 0" in fresh().item(6).found


@override_settings(RELAY_KEY_GENERATED=True)
def test_generated_key_never_advertises(community: Community) -> None:
    report = fresh()
    assert [c.item for c in report.failing] == [5]
    assert "RELAY_SIGNING_KEY" in report.item(5).found
    assert not advertised()


def test_verdict_is_cached_for_a_few_seconds(community: Community) -> None:
    from relayinfo.readiness import evaluate_readiness

    first = evaluate_readiness()
    assert evaluate_readiness() is first
    assert evaluate_readiness(use_cache=False) is not first


def test_unreachable_database_is_not_ready(community: Community) -> None:
    from buzzrelay.admin_commands.readiness import inspect_url

    report = inspect_url("postgres://postgres@127.0.0.1:1/nowhere")
    assert not report.ready and report.error
    assert all(not c.passed for c in report.checks)


def test_application_name_parsing() -> None:
    ours = parse_application_name("buzzrelay/0.1.0 stamps=1 key=abcdef01")
    assert ours is not None and ours.stamps and ours.key_id == "abcdef01"
    assert ours.version == "0.1.0"
    legacy = parse_application_name("buzzrelay/0.0.9 key=abcdef01")
    assert legacy is not None and not legacy.stamps and legacy.key_id == "abcdef01"
    bare = parse_application_name("buzzrelay/0.0.1")
    assert bare is not None and not bare.stamps and bare.key_id is None
    assert parse_application_name("psql") is None
    assert parse_application_name("") is None
    assert parse_application_name("buzz-admin/0.1.0 readiness") is None
    assert len(settings.RELAY_APPLICATION_NAME.encode()) <= 63
    assert parse_application_name(settings.RELAY_APPLICATION_NAME) is not None
