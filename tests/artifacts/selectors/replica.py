"""A client's local collection, kept by rounds the way PROTOCOL.md section 5 asks clients to.

Pages are applied idempotently: a reset empties the collection first, events upsert by `d`,
removals delete by `d`. Used by the selector tests to check what a reader ends up holding.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import orjson

from artifacts.models import Community
from artifacts.selectors.filters import parse_filter
from artifacts.selectors.rounds import Page, prepare_round, read_page


def tag(event: dict[str, Any], name: str) -> str | None:
    return next((t[1] for t in event["tags"] if len(t) > 1 and t[0] == name), None)


class Replica:
    def __init__(
        self,
        community: Community,
        reader: str,
        *,
        channels: list[str] | None = None,
        types: list[str] | None = None,
        overlap: timedelta = timedelta(0),
    ) -> None:
        self.community = community
        self.reader = reader
        self.filter: dict[str, Any] = {"artifact": "current"}
        if channels is not None:
            self.filter["#h"] = channels
        if types is not None:
            self.filter["#type"] = types
        self.overlap = overlap
        self.items: dict[str, dict[str, Any]] = {}
        self.token: str | None = None
        self.pages: list[Page] = []

    def page(
        self,
        limit: int = 100,
        *,
        ready: bool = True,
        before_snapshot: Callable[[], None] | None = None,
        **options: Any,
    ) -> Page:
        query = parse_filter({**self.filter, "progress": self.token, "limit": limit})
        request = prepare_round(
            community_id=self.community.pk, reader=self.reader, query=query
        )
        page = read_page(
            request,
            ready=ready,
            overlap=self.overlap,
            before_snapshot=before_snapshot,
            **options,
        )
        self.apply(page)
        return page

    def apply(self, page: Page) -> None:
        if page.reset:
            self.items.clear()
        for raw in page.events:
            event = orjson.loads(raw)
            d = tag(event, "d")
            assert d is not None
            self.items[d] = event
        for d, _reason in page.removed:
            self.items.pop(d, None)
        self.token = page.progress
        self.pages.append(page)

    def round(
        self, limit: int = 100, *, ready: bool = True, max_pages: int = 10_000, **options: Any
    ) -> list[Page]:
        """Pages until `more: false`; returns this round's pages."""
        pages = []
        for _ in range(max_pages):
            page = self.page(limit, ready=ready, **options)
            pages.append(page)
            if not page.more:
                return pages
        raise AssertionError("round did not finish")

    def heads(self) -> dict[str, str]:
        """d -> head event id."""
        return {d: event["id"] for d, event in self.items.items()}

    def fresh(self, limit: int = 1000) -> dict[str, str]:
        """What a brand-new full round would deliver now."""
        other = Replica(
            self.community, self.reader, overlap=self.overlap,
            channels=self.filter.get("#h"), types=self.filter.get("#type"),
        )
        other.round(limit)
        return other.heads()
