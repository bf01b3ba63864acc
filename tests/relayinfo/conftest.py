"""Fixtures for the readiness, NIP-11 and fleet tests.

Readiness is about committed state seen by every process, so most tests here are transactional
(tests/conftest.py puts back the sync_state row each flush removes). Whatever a test breaks on
purpose (an index, a ledger row, a column default, a role) it restores in a finally block, so no
later test inherits it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test import Client

from artifacts.models import Community
from relayinfo.readiness import ReadinessReport, forget_cached_readiness, reconcile_readiness

HOST = "team.example"
NOSTR_JSON = "application/nostr+json"

transactional = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_verdict() -> Iterator[None]:
    forget_cached_readiness()
    yield
    forget_cached_readiness()


@pytest.fixture
def community(request: pytest.FixtureRequest) -> Community:
    return Community.objects.create(host=HOST, name="Team", artifacts_enabled=True)


def nip11(host: str = HOST, accept: str | None = NOSTR_JSON, path: str = "/") -> Any:
    extra: dict[str, Any] = {"HTTP_HOST": host}
    if accept is not None:
        extra["HTTP_ACCEPT"] = accept
    return Client().get(path, **extra)


def advertised(host: str = HOST) -> bool:
    """Whether NIP-11 advertises artifacts.incremental now (a fresh verdict)."""
    forget_cached_readiness()
    document = nip11(host).json()
    in_list = "artifacts.incremental" in document["supported_extensions"]
    assert in_list == ("incremental" in document["artifacts"])
    return in_list


def connect(*, application_name: str, user: str | None = None) -> psycopg.Connection[Any]:
    """A real connection to the test database, as another writer (or role) would open one."""
    params = connection.settings_dict
    return psycopg.connect(
        dbname=params["NAME"], user=user or params["USER"], password=params["PASSWORD"] or None,
        host=params["HOST"] or None, port=params["PORT"] or None, autocommit=True,
        application_name=application_name,
    )


def wait_for(predicate: Callable[[], bool], *, timeout: float = 5.0) -> bool:
    """Poll `predicate` (a closed backend leaves pg_stat_activity a moment after close())."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def fresh() -> ReadinessReport:
    """A fresh verdict as the fleet refresher computes it, every 10 s in a serving process: it
    also reconciles the sync epoch's episodes (requests only read the verdict)."""
    return reconcile_readiness()


def execute(sql: str, params: list[Any] | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
