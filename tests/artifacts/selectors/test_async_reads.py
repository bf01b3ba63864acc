"""The HTTP edge's asyncio pool (artifacts/selectors/async_reads.py): lookups on the loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from artifacts.selectors import async_reads
from artifacts.selectors.async_reads import connection_pool, lookup_community
from tests.factories import make_community

pytestmark = pytest.mark.django_db(transaction=True)


def test_lookups_in_steady_use_skip_the_pools_round_trip_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lookup-only request (`POST /event`, NIP-11) counts as using its connection, like a
    page: in steady use the pool's check (a round trip of its own) is skipped."""
    community = make_community("lookups.example")
    checks: list[Any] = []
    real_check = AsyncConnectionPool.check_connection

    async def counted_check(conn: Any) -> None:
        checks.append(conn)
        await real_check(conn)

    monkeypatch.setattr(async_reads.AsyncConnectionPool, "check_connection", counted_check)

    async def lookups() -> list[int | None]:
        try:
            found = []
            for host in ["lookups.example", "LOOKUPS.example", "elsewhere.example"] * 4:
                served = await lookup_community(host)
                found.append(served.pk if served is not None else None)
            return found
        finally:
            await (await connection_pool()).close()

    found = asyncio.run(lookups())
    assert found == [community.pk, community.pk, None] * 4
    # A connection is checked when it is new to the pool, not again for every lookup.
    assert len(checks) == len({id(conn) for conn in checks}) < len(found), len(checks)
