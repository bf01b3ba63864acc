"""The sync epoch and the database identity every progress token is bound to."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from artifacts.selectors.sync_epoch import current_sync_state, database_identity
from artifacts.services.sync_epoch import bump_epoch
from buzzrelay.cli import main

pytestmark = pytest.mark.django_db(transaction=True)


def test_identity_is_the_cluster_and_database_and_stable() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT system_identifier::text FROM pg_control_system()")
        system_identifier = cursor.fetchone()[0]
        cursor.execute("SELECT oid::text FROM pg_database WHERE datname = current_database()")
        oid = cursor.fetchone()[0]
        cursor.execute("SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)")
        timeline = int(cursor.fetchone()[0], 16)
    # The timeline too, past the first: a promoted standby keeps the system identifier and the
    # oid (tests/faults/test_failover.py); on timeline 1 the identity is spelled as before.
    expected = f"{system_identifier}/{oid}" + ("" if timeline == 1 else f"/{timeline}")
    assert database_identity() == expected
    epoch, identity = current_sync_state()
    assert identity == database_identity()
    assert epoch >= 0


def test_bump_moves_the_epoch_on_and_records_why() -> None:
    before, _ = current_sync_state()
    after = bump_epoch(reason="restored from backup")
    assert after == before + 1
    assert current_sync_state()[0] == after
    with connection.cursor() as cursor:
        cursor.execute("SELECT reason, bumped_at <= now() FROM sync_state WHERE id = 1")
        assert cursor.fetchone() == ("restored from backup", True)


def test_a_missing_row_is_epoch_zero_and_a_bump_recreates_it() -> None:
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM sync_state")
    assert current_sync_state()[0] == 0
    assert bump_epoch(reason="after a manual fix") == 1
    assert current_sync_state()[0] == 1


def test_concurrent_bumps_each_count() -> None:
    before, _ = current_sync_state()
    errors: list[BaseException] = []

    def bump() -> None:
        try:
            for _ in range(5):
                bump_epoch(reason="concurrent")
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=bump) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert current_sync_state()[0] == before + 15


def test_buzz_admin_bump_epoch(capsys: pytest.CaptureFixture[str]) -> None:
    before, identity = current_sync_state()
    assert main(["bump-epoch", "--reason", "manual data fix"]) == 0
    out = capsys.readouterr().out
    after = current_sync_state()[0]
    assert after > before
    assert f"{before} -> {after}" in out
    assert identity in out
    assert "manual data fix" in out


def test_bump_after_a_restore_never_lands_on_an_epoch_clients_hold() -> None:
    """Backup taken at epoch e; the live database is bumped twice (clients hold e+1, e+2); the
    backup is restored (epoch e again); the operator's bump must not hand out e+1 or e+2."""
    backup_epoch = current_sync_state()[0]
    handed_out = {bump_epoch(reason="writer seen"), bump_epoch(reason="writer left")}
    with connection.cursor() as cursor:  # the restore puts the backup's row back
        cursor.execute("UPDATE sync_state SET epoch = %s WHERE id = 1", [backup_epoch])
    after_restore = bump_epoch(reason="restored", past_any_restore=True)
    assert after_restore not in handed_out
    assert after_restore > max(handed_out)
    # Readiness bumps afterwards still count on from there.
    assert bump_epoch(reason="writer seen") == after_restore + 1
