"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.register_profile("dev", deadline=None, max_examples=20)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _sync_state_row(request: pytest.FixtureRequest) -> None:
    """Every database test starts with the sync_state row its migration inserts.

    Transactional tests end with a flush that empties every table, migration-inserted rows
    included; `serialized_rollback` would restore them but collides with the content types
    post_migrate recreates after each flush. Re-inserting the one row the relay relies on is
    what a migrated database always has.
    """
    if request.node.get_closest_marker("django_db") is None:
        return
    request.getfixturevalue("_django_db_helper")
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO sync_state (id, epoch, bumped_at, reason)"
            " VALUES (1, 1, now(), 'initial') ON CONFLICT (id) DO NOTHING"
        )


@pytest.fixture(scope="session", autouse=True)
def _static_files_collected() -> None:
    """Pages name their static files by the manifest's hashed names, as in production, so the
    files are collected first, when they changed (as `buzz-admin serve` does)."""
    from buzzrelay.static_files import collect_static

    collect_static()


@pytest.fixture(scope="session", autouse=True)
def _database_threads_closed(django_db_setup: None) -> object:
    """Views run synchronous work on database threads that keep their connections
    (relaycore.dbthreads); they are stopped before the test database is dropped, which an open
    connection would refuse."""
    yield
    from relaycore.dbthreads import stop_threads

    stop_threads()


@pytest.fixture(autouse=True)
def _no_unrecorded_episode() -> None:
    """Each test starts without an item-4 failure owed from another test's world (the relay
    keeps one per process until its refresher records it; the database was flushed since)."""
    from relayinfo.readiness.verdict import take_unrecorded_episode

    take_unrecorded_episode()


@pytest.fixture(autouse=True)
def _sessions_keep_the_relays_name() -> object:
    """A test that runs `buzz-admin` in-process (buzzrelay.cli.main) renames every session of
    this process `buzz-admin/...`, as the command does for itself. Left so, the next pool built
    would announce no relay key and readiness item 4 would no longer see this process as a
    writer; the relay's name is put back, and a pool built meanwhile closed."""
    from django.db import connections

    from buzzrelay.admin_commands._pg import close_with_pool

    def options(alias: str) -> dict[str, Any]:
        return connections[alias].settings_dict.setdefault("OPTIONS", {})

    before = {alias: options(alias).get("application_name") for alias in connections}
    yield
    for alias, name in before.items():
        if options(alias).get("application_name") != name:
            if name is None:
                options(alias).pop("application_name")
            else:
                options(alias)["application_name"] = name
            close_with_pool(connections[alias])


# Tests that start PostgreSQL and Redis of their own (the fault deployment's embedded servers,
# fleets, the soak): DATABASE_URL and REDIS_URL do not reach them, so a second suite run against
# other servers would only repeat them. `.ci/run` runs them once (`-m "not own_engines"`).
OWN_ENGINES = ("tests/faults/", "tests/fleet/")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(OWN_ENGINES):
            item.add_marker(pytest.mark.own_engines)
