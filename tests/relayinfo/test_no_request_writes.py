"""No request handler writes to the database: `GET /info`, `GET /metrics` and the staff readiness
page only read the verdict (and the writers' lag, this process's unflushed samples included),
even while a non-stamping writer is live (the state in which an evaluation that reconciles bumps
the sync epoch and opens a fleet episode) or after it left (when it would close one). Only the
fleet refresher reconciles (relayinfo.readiness.episodes).

Writes are counted by PostgreSQL itself: the rows inserted, updated and deleted in this database's
tables (`pg_stat_user_tables`), with this backend's pending statistics flushed before each
reading. The staff session's row is left out: the console's idle expiry saves the session on
every staff request (SESSION_SAVE_EVERY_REQUEST), which is the login's state, not readiness'. Every
request of the test client runs on this thread's connection, so its writes would be counted too.
The refresher's evaluation is the positive control: the same counters see its writes.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from artifacts.models import Community
from artifacts.selectors.sync_epoch import current_sync_state
from artifacts.services.stamp_lag import flush_lag_samples, record_lag
from relayinfo.models import FleetEpisode
from tests.relayinfo.conftest import HOST, connect, fresh, transactional, wait_for

pytestmark = transactional

LEGACY_NAME = "buzzrelay/0.0.9 key=0000abcd"


def rows_written() -> int:
    """Rows inserted, updated or deleted in this database's tables so far (the staff session's
    aside), as PostgreSQL counts them."""
    with connection.cursor() as cursor:
        # This backend's counters reach shared memory when it next goes idle (after this
        # statement); the reading statement then drops its cached snapshot of them.
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables"
            " WHERE relname <> 'django_session'"
        )
        return int(cursor.fetchone()[0])


@pytest.fixture
def staff_client() -> Client:
    staff = User.objects.create_user("operator", password="correct horse", is_staff=True)
    client = Client()
    client.force_login(staff)
    return client


def get_every_surface(staff_client: Client) -> None:
    for path in ("/info", "/metrics"):
        response = Client().get(path, HTTP_HOST=HOST)
        assert response.status_code == 200, (path, response.status_code)
    response = staff_client.get("/admin/relayinfo/readiness/")
    assert response.status_code == 200


def assert_requests_write_nothing(staff_client: Client) -> None:
    # A writer's lag sample waiting in this process's buffer (the next write flushes it): the
    # pages show it without writing it.
    flush_lag_samples()
    record_lag(12.5)
    epoch, episodes = current_sync_state()[0], FleetEpisode.objects.count()
    before = rows_written()
    get_every_surface(staff_client)
    assert rows_written() == before
    assert current_sync_state()[0] == epoch
    assert FleetEpisode.objects.count() == episodes


def test_info_metrics_and_the_staff_page_write_nothing_while_a_legacy_writer_comes_and_goes(
    community: Community, staff_client: Client
) -> None:
    assert fresh().ready
    assert_requests_write_nothing(staff_client)

    legacy = connect(application_name=LEGACY_NAME)
    try:
        # Item 4 fails and no episode is open: a reconciling evaluation would open one now.
        assert_requests_write_nothing(staff_client)
        assert not FleetEpisode.objects.exists()
        # The positive control: the refresher's evaluation writes, and the counters see it.
        before = rows_written()
        assert not fresh().ready
        assert rows_written() > before
        assert FleetEpisode.objects.filter(closed_at__isnull=True).count() == 1
    finally:
        pid = legacy.info.backend_pid
        legacy.close()

    def left() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
            return cursor.fetchone()[0] == 0

    assert wait_for(left)
    # The writer left; the closing bump is owed to the refresher, never paid by a request.
    assert_requests_write_nothing(staff_client)
    assert FleetEpisode.objects.filter(closed_at__isnull=True).count() == 1
    assert fresh().ready
    assert not FleetEpisode.objects.filter(closed_at__isnull=True).exists()
