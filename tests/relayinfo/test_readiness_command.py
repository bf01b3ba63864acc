"""`buzz-admin readiness [--database-url URL ...]`: the reference table; exit 0 only if all pass."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.db import connection

from artifacts.models import Community
from artifacts.schema import INDEXES_BY_NAME
from buzzrelay.cli import main
from relayinfo import fleet
from relayinfo.models import RelayInstance
from tests.relayinfo.conftest import execute, transactional

pytestmark = transactional
HEADER = ["Deployment", "Schema and indexes", "Running timestamp writers", "Relay key", "Fence"]


def database_url() -> str:
    params = connection.settings_dict
    return f"postgres://{params['USER']}@{params['HOST']}:{params['PORT']}/{params['NAME']}"


@pytest.fixture
def serving_instance(community: Community) -> None:
    """A registered relay instance (item 5 is judged from registrations, seen from outside)."""
    fleet.register_instance(instance=uuid.uuid4())


def table_rows(output: str) -> list[list[str]]:
    lines = output.splitlines()
    assert lines[0].split() == " ".join(HEADER).split()
    rows = []
    for line in lines[2:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def test_ready_deployment_passes_every_column(
    serving_instance: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["readiness", "--database-url", f"prod={database_url()}"]) == 0
    out = capsys.readouterr().out
    assert table_rows(out) == [["prod", "Pass", "Pass", "Pass", "Pass"]]
    assert "Every deployment is ready" in out


def test_several_deployments_in_one_table_fail_if_one_fails(
    serving_instance: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([
        "readiness", "--database-url", f"prod={database_url()}",
        "gone=postgres://postgres@127.0.0.1:1/nowhere", "--database-url", database_url(),
    ])
    assert code == 1
    out = capsys.readouterr().out
    rows = table_rows(out)
    assert rows[0] == ["prod", "Pass", "Pass", "Pass", "Pass"]
    assert rows[1] == ["gone", "Fail", "Fail", "Fail", "Fail"]
    assert rows[2][1:] == ["Pass", "Pass", "Pass", "Pass"]
    assert "database unreachable" in out


def test_dropped_index_fails_schema_column_and_names_the_fix(
    serving_instance: None, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = INDEXES_BY_NAME["channel_members_sync"]
    execute(spec.drop_sql(concurrently=False))
    try:
        assert main(["readiness", "--database-url", f"staging={database_url()}"]) == 1
    finally:
        execute(spec.create_sql(concurrently=False))
    out = capsys.readouterr().out
    assert table_rows(out) == [["staging", "Fail", "Pass", "Pass", "Pass"]]
    assert "channel_members_sync" in out and "buzz-admin build-indexes" in out


def test_without_a_registered_instance_the_key_cannot_be_confirmed(
    community: Community, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not RelayInstance.objects.exists()
    assert main(["readiness", "--database-url", f"idle={database_url()}"]) == 1
    out = capsys.readouterr().out
    assert table_rows(out) == [["idle", "Pass", "Pass", "Fail", "Pass"]]
    assert "no live relay instance is registered" in out


def test_command_line_entry_point_uses_database_url(serving_instance: None) -> None:
    env = {"PATH": "/usr/bin:/bin", "DATABASE_URL": database_url()}
    result = subprocess.run(
        [sys.executable, "-m", "buzzrelay.cli", "readiness"],
        cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[0].split() == " ".join(HEADER).split()
