"""One converter from Django's database settings to psycopg's connection arguments."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from django.db import connection

from artifacts.db import psycopg_connect_kwargs


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
