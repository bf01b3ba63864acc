"""`manage.py` has every `buzz-admin` subcommand, with the same arguments and the same code, and
`manage.py migrate` is the runbook's advisory-locked, index-aware migrate."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.core.management import get_commands, load_command_class
from django.core.management.base import BaseCommand

from artifacts.schema import MIGRATION_0076
from buzzrelay import VERSION
from buzzrelay.admin_commands._pg import MIGRATION_LOCK_KEY
from buzzrelay.cli import build_parser, management_command_name, subcommands
from buzzrelay.management.base import AdminCommand
from tests.artifacts.migrations.scratch import (
    ROOT,
    Scratch,
    base_name,
    populated_template,
    scratch_database,
    short_id,
    subprocess_env,
    wait_until,
)

SUBCOMMANDS = sorted(subcommands())


def manage(scratch: Scratch, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], capture_output=True, text=True, timeout=timeout,
        env=subprocess_env(DATABASE_URL=scratch.url), cwd=ROOT,
    )


@pytest.fixture
def db(request: pytest.FixtureRequest) -> Iterator[Scratch]:
    with scratch_database(f"{base_name()}_manage_{short_id(request.node.nodeid)}") as scratch:
        yield scratch


def _options(parser: argparse.ArgumentParser) -> set[str]:
    found = {option for action in parser._actions for option in action.option_strings}
    found |= {action.dest for action in parser._actions if not action.option_strings}
    return found


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser(subcommands())
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]  # type: ignore[no-any-return]


@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_every_buzz_admin_subcommand_is_a_manage_py_command_with_its_arguments(
    subcommand: str,
) -> None:
    name = management_command_name(subcommand)
    assert get_commands()[name] == "buzzrelay", name
    command: BaseCommand = load_command_class("buzzrelay", name)
    if isinstance(command, AdminCommand):
        # The same module: its arguments and its run().
        assert command.module is subcommands()[subcommand]
    manage_py = _options(command.create_parser("manage.py", name))
    # `--database-url` is buzz-admin's (manage.py reads DATABASE_URL before parsing), except
    # where it is the command's own argument (readiness: several deployments).
    expected = _options(_subparser(subcommand)) - {"-h", "--help", "help", "--database-url"}
    if subcommand == "readiness":
        expected.add("--database-url")
    assert expected <= manage_py, expected - manage_py


def test_check_keeps_djangos_system_checks_and_the_schema_tables_are_check_schema() -> None:
    assert get_commands()["check"] == "django.core"
    assert management_command_name("check") == "check_schema"
    assert management_command_name("bump-epoch") == "bump_epoch"


def test_manage_py_commands_answer_as_buzz_admin_does(db: Scratch) -> None:
    empty = manage(db, "check_schema")
    assert empty.returncode == 1
    assert empty.stdout == db.buzz_admin("check").stdout
    migrated = manage(db, "migrate")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert "every check passes" in migrated.stdout
    schema = manage(db, "check_schema")
    assert schema.returncode == 0 and "all 13 checks pass" in schema.stdout

    created = manage(db, "community", "--host", "team.example", "--name", "Team")
    assert created.returncode == 0, created.stderr
    assert "community team.example: created" in created.stdout
    assert db.value("SELECT name FROM communities WHERE host = 'team.example'") == "Team"
    bumped = manage(db, "bump_epoch", "--reason", "restored from backup")
    assert bumped.returncode == 0, bumped.stderr
    assert db.value("SELECT reason FROM sync_state") == "restored from backup"

    readiness = manage(db, "readiness")
    assert readiness.stdout.splitlines()[:3] == db.buzz_admin("readiness").stdout.splitlines()[:3]
    assert readiness.returncode == 1  # no relay has run here: no fleet, so not ready

    refused = manage(db, "community", "--host", "Not A Host")
    assert refused.returncode == 2 and "host must be a DNS name" in refused.stderr
    serve = subprocess.run(
        [sys.executable, "manage.py", "serve", "--workers", "2"], capture_output=True, text=True,
        timeout=60, env=subprocess_env(DATABASE_URL=db.url, REDIS_URL=None), cwd=ROOT,
    )
    assert serve.returncode == 2 and "--workers above 1 needs REDIS_URL" in serve.stderr


def test_manage_py_migrate_waits_for_the_migration_lock_and_names_its_sessions(
    db: Scratch,
) -> None:
    with db.connect() as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", [MIGRATION_LOCK_KEY])
        run = subprocess.Popen(
            [sys.executable, "manage.py", "migrate"], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=subprocess_env(DATABASE_URL=db.url), cwd=ROOT,
        )
        # Waiting on the lock, not merely connected: a session shows in pg_stat_activity before
        # its first statement, and unlocking then would let its try-lock succeed at once.
        wait_until(
            lambda: db.value(
                "SELECT count(*) FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid"
                " WHERE a.application_name = %s AND l.locktype = 'advisory' AND NOT l.granted",
                [f"buzz-admin/{VERSION} migration lock"],
            ) == 1,
            timeout=60, what="manage.py migrate to wait for the lock",
        )
        assert db.value("SELECT to_regclass(%s)", ["django_migrations"]) is None  # nothing yet
        holder.execute("SELECT pg_advisory_unlock(%s)", [MIGRATION_LOCK_KEY])
        seen: set[str] = set()
        while run.poll() is None:
            seen |= {name for (name,) in holder.execute(
                "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
            ).fetchall()}
        out, err = run.communicate(timeout=240)
    assert run.returncode == 0, out + err
    assert "waiting for the migration lock" in out
    assert MIGRATION_0076 in db.ledger()
    assert not [name for name in seen if name.startswith("buzzrelay/")]


@pytest.mark.slow
def test_manage_py_migrate_stops_before_an_index_a_populated_table_needs() -> None:
    template = populated_template()
    name = f"{base_name()}_manage_populated"
    with scratch_database(name, template=template.name) as db:
        stopped = manage(db, "migrate")
        assert stopped.returncode == 3, stopped.stdout + stopped.stderr
        assert f"stopped before artifacts.{MIGRATION_0076}" in stopped.stderr
        assert "build-indexes" in stopped.stderr
        assert MIGRATION_0076 not in db.ledger()
        whole = manage(db, "migrate", "--build-indexes")
        assert whole.returncode == 0, whole.stdout + whole.stderr
        assert manage(db, "check_schema").returncode == 0
