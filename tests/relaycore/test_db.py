"""One converter from Django's database settings to psycopg's connection arguments."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from django.db import connection

from relaycore.db import psycopg_connect_kwargs, server_spoke_while_idle


def test_django_only_options_are_dropped_and_libpq_ones_kept() -> None:
    database: dict[str, Any] = {
        "NAME": "buzz", "USER": "relay", "PASSWORD": "", "HOST": "db.internal", "PORT": 5433,
        "OPTIONS": {
            "pool": {"max_size": 4}, "isolation_level": 1, "server_side_binding": True,
            "assume_role": "x", "context": object(), "cursor_factory": object(),
            "application_name": "buzzrelay/0.1.0 stamps=1 key=0000abcd", "sslmode": "require",
            "connect_timeout": 5,
        },
    }
    assert psycopg_connect_kwargs(database) == {
        "dbname": "buzz", "user": "relay", "host": "db.internal", "port": "5433",
        "application_name": "buzzrelay/0.1.0 stamps=1 key=0000abcd", "sslmode": "require",
        "connect_timeout": 5, "prepare_threshold": None,
    }


def test_prepare_threshold_is_djangos_none_unless_configured() -> None:
    database: dict[str, Any] = {"NAME": "buzz", "OPTIONS": {"prepare_threshold": 1000}}
    assert psycopg_connect_kwargs(database)["prepare_threshold"] == 1000
    assert psycopg_connect_kwargs({"NAME": "buzz"}) == {"dbname": "buzz",
                                                       "prepare_threshold": None}


@pytest.mark.django_db
def test_the_arguments_reach_the_database_django_uses() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_database()")
        expected = cursor.fetchone()[0]
    with psycopg.connect(autocommit=True, **psycopg_connect_kwargs()) as conn:
        row = conn.execute("SELECT current_database(), current_setting('application_name')")
        assert row.fetchone() == (expected, connection.settings_dict["OPTIONS"]["application_name"])


@pytest.mark.django_db(transaction=True)
def test_a_session_the_server_ended_is_seen_by_polling_its_socket() -> None:
    with psycopg.connect(**psycopg_connect_kwargs(), autocommit=True) as idle:
        idle.execute("SELECT 1").fetchone()
        assert not server_spoke_while_idle(idle)  # a healthy idle session: nothing to read
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [idle.info.backend_pid])
        deadline = time.monotonic() + 5
        while not server_spoke_while_idle(idle) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server_spoke_while_idle(idle)
        with pytest.raises(psycopg.OperationalError):
            idle.execute("SELECT 1")
    assert server_spoke_while_idle(idle)  # closed: certainly not usable
