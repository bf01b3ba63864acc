"""The artifact admin's paging without COUNT(*): the probe row, the budget, the estimate
(keyset paging itself: tests/artifacts/test_admin_paging.py)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models.expressions import RawSQL
from django.test.utils import CaptureQueriesContext

from artifacts.admin_browse import estimated_rows
from artifacts.admin_paging import KeysetPaginator
from artifacts.models import Community

pytestmark = pytest.mark.django_db


@pytest.fixture
def communities() -> list[Community]:
    return [Community.objects.create(host=f"c{i}.example", name=f"c{i}") for i in range(5)]


def test_pages_know_only_whether_another_follows(communities: list[Community]) -> None:
    ordered = Community.objects.order_by("id")
    first = KeysetPaginator(ordered, 2, page_number=1)
    with CaptureQueriesContext(connection) as queries:
        page = first.rows()
        assert first.has_next and first.count == 2
    assert [c.host for c in page] == ["c0.example", "c1.example"]
    assert all("COUNT(" not in q["sql"].upper() for q in queries)
    assert sum("FROM \"communities\"" in q["sql"] for q in queries) == 1  # one fetch, cached
    second = KeysetPaginator(ordered, 2, page_number=2, after=first.next_key())
    last = KeysetPaginator(ordered, 2, page_number=3, after=second.next_key())
    assert [c.host for c in last.rows()] == ["c4.example"]
    assert not last.has_next and last.count == 5 and last.next_key() is None


def test_a_page_past_its_budget_is_empty_and_says_so(communities: list[Community]) -> None:
    slow = Community.objects.annotate(nap=RawSQL("pg_sleep(5)", [])).order_by("id")
    paginator = KeysetPaginator(slow, 2, page_number=1)
    assert paginator.rows() == []
    assert paginator.timed_out
    # The connection is usable afterwards: the budget was local to the page's transaction.
    assert Community.objects.count() == 5
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] != "3s"


def test_estimated_rows_come_from_pg_class(communities: list[Community]) -> None:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE communities")
    assert estimated_rows("communities") == 5
    assert estimated_rows("no_such_table") is None
