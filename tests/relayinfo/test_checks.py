"""System checks buzz.W001-W006: warnings from the readiness verdict, never blocking migrate."""

from __future__ import annotations

from io import StringIO

from django.core.checks import WARNING, run_checks
from django.core.management import call_command
from django.db import connection

from artifacts.models import Community
from artifacts.schema import INDEXES_BY_NAME
from relayinfo import checks
from tests.relayinfo.conftest import execute, transactional

pytestmark = transactional


def buzz_messages(databases: list[str] | None = None) -> list:  # type: ignore[type-arg]
    checks._memo = None
    return [m for m in run_checks(databases=databases) if m.id and m.id.startswith("buzz.")]


def test_ready_deployment_has_no_readiness_warnings(community: Community) -> None:
    assert buzz_messages(["default"]) == []


def test_failing_item_is_a_warning_with_its_stable_id_and_fix(community: Community) -> None:
    spec = INDEXES_BY_NAME["artifact_heads_modified"]
    execute(spec.drop_sql(concurrently=False))
    try:
        messages = buzz_messages(["default"])
        assert [m.id for m in messages] == ["buzz.W003"]
        assert messages[0].level == WARNING
        assert "artifact_heads_modified" in messages[0].msg
        assert "build-indexes" in messages[0].hint
        # Like Django's own database checks: nothing unless a database is named.
        assert buzz_messages(None) == []
        # A warning never stops migrate (it runs the database checks first).
        out = StringIO()
        call_command("migrate", stdout=out, stderr=out, verbosity=1, skip_checks=False)
        assert "buzz.W003" in out.getvalue()
    finally:
        execute(spec.create_sql(concurrently=False))
    assert buzz_messages(["default"]) == []


def test_unreachable_database_gives_no_readiness_warnings(community: Community) -> None:
    saved = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = "1"
    try:
        assert buzz_messages(["default"]) == []
    finally:
        connection.close()
        connection.settings_dict["PORT"] = saved
    assert buzz_messages(["default"]) == []
