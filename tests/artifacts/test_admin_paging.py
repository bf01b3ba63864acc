"""Keyset paging of the admin's big lists (artifacts.admin_paging): page N from page N-1's key,
no OFFSET, the same rows as the list read whole; the links of the heads list carry the keys."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import QuerySet
from django.test import Client
from django.test.utils import CaptureQueriesContext

from artifacts.admin_paging import KeysetPaginator
from artifacts.models import ArtifactHead, Community
from tests.factories import create_artifact, make_channel, make_community, make_key

HEADS = "/admin/artifacts/artifacthead/"


def _walk(ordered: QuerySet[Any], per_page: int) -> tuple[list[list[int]], list[str]]:
    """Every page, following each page's next key; the SQL of the pages after the first."""
    pages: list[list[int]] = []
    after: str | None = None
    statements: list[str] = []
    while True:
        paginator = KeysetPaginator(ordered, per_page, page_number=len(pages) + 1, after=after)
        with CaptureQueriesContext(connection) as queries:
            pages.append([row.pk for row in paginator.rows()])
        if after is not None:
            statements += [q["sql"] for q in queries]
        after = paginator.next_key()
        if after is None:
            return pages, statements


@pytest.mark.django_db
@pytest.mark.parametrize("per_page", [1, 2, 3, 5])
def test_pages_follow_keys_without_offset_and_equal_the_whole_list(per_page: int) -> None:
    # listing_version repeats: the ordering's last field breaks the ties, as the heads' does.
    for i in range(7):
        Community.objects.create(host=f"c{i}.example", name=f"c{i}", listing_version=i % 3)
    ordered = Community.objects.order_by("-listing_version", "-id")
    whole = [community.pk for community in ordered]
    pages, statements = _walk(ordered, per_page)
    assert [pk for page in pages for pk in page] == whole
    assert all(0 < len(page) <= per_page for page in pages)
    assert statements and not [s for s in statements if "OFFSET" in s.upper()]
    assert not [s for s in statements if "COUNT(" in s.upper()]
    # Walking back from the last page with its previous key gives the page before it.
    last = _last_page(ordered, per_page, len(pages))
    if len(pages) > 2:
        back = KeysetPaginator(ordered, per_page, page_number=len(pages) - 1,
                               before=last.previous_key())
        assert [row.pk for row in back.rows()] == pages[-2]
        assert back.has_next
    # A typed ?p=2 with no key (an old bookmark) is still served, by OFFSET: the same rows.
    assert [row.pk for row in KeysetPaginator(ordered, per_page, page_number=2).rows()] == pages[1]


def _last_page(ordered: QuerySet[Any], per_page: int, number: int) -> KeysetPaginator:
    after = None
    for page in range(1, number + 1):
        paginator = KeysetPaginator(ordered, per_page, page_number=page, after=after)
        after = paginator.next_key()
    return paginator


@pytest.mark.django_db
def test_an_ordering_in_two_directions_is_refused() -> None:
    with pytest.raises(ValueError, match="one direction"):
        KeysetPaginator(Community.objects.order_by("-listing_version", "id"), 2)


@pytest.mark.django_db(transaction=True)
def test_the_heads_list_pages_by_key() -> None:
    community = make_community("paging.example")
    owner = make_key()
    channel = make_channel(community, name="general", owner=owner)
    for number in range(105):
        create_artifact(community, owner, channel, title=f"task {number}")
    user = User.objects.create_superuser("operator", password="correct horse")
    client = Client()
    client.force_login(user)
    whole = [str(d) for d in ArtifactHead.objects.order_by(
        "-community_id", "-modified_at", "-artifact_id").values_list("artifact_id", flat=True)]
    seen: list[str] = []
    url = HEADS
    for number in (1, 2, 3):
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url)
        assert response.status_code == 200
        page = response.content.decode()
        assert f"rows {(number - 1) * 50 + 1}-" in page
        assert not [q["sql"] for q in queries if "OFFSET" in q["sql"].upper()]
        shown = re.findall(r'<th class="field-artifact_id"><a href="[^"]*">([0-9a-f-]{36})</a>',
                           page)
        seen += shown
        following = re.search(r'<a role="button" href="(\?[^"]*)">' + str(number + 1), page)
        if number == 3:
            assert following is None and "more follow" not in page
        else:
            assert following is not None, page[-3000:]
            url = HEADS + unescape(following.group(1))
            assert "after=" in url
    assert seen == whole
    # A key that is not one the list wrote is no page: the admin's own "bad query" answer.
    assert client.get(HEADS, {"p": "2", "after": "not-a-key"}).status_code == 302
