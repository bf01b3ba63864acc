"""Keyset paging for the admin's big lists: page N is found from page N-1's last row, not by
counting N-1 pages of rows again.

Django's paginator (and the change list built on it) slices the queryset, which PostgreSQL
serves with OFFSET: page 50 of the heads read and threw away 2,450 rows along the index before
its 50 (260 ms, against 5-16 ms for page 1). Here the link to the next page carries the last
row's ordering key (`after`), and the page is the rows whose key comes after it: a row
comparison, `(community_id, modified_at, artifact_id) < (...)`, which the index the list is
ordered by serves as a range, so every page costs what the first does. The link to the previous
page carries the first row's key (`before`) and walks the index the other way.

Neither Django nor a well-kept package offers keyset paging for the admin's change list
(django-keyset-pagination and the like page DRF or plain views), so it is written here. A page
number typed without a key (`?p=50`, an old bookmark) is still served, by OFFSET, under the same
statement budget.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from django.db import OperationalError, connection, models, transaction
from django.db.models import F, Func, QuerySet, Value
from django.db.models.lookups import GreaterThan, LessThan

__all__ = ["AFTER_VAR", "BEFORE_VAR", "BadCursor", "KeysetPaginator", "decode_key", "page_key"]

# Query-string names of the keys (beside Django's PAGE_VAR `p`, which stays the page's number).
AFTER_VAR = "after"
BEFORE_VAR = "before"
# Long enough for any page an index serves (milliseconds), short enough that a filter on a rare
# value cannot hold a connection: the operator is told to narrow by community and channel.
LIST_BUDGET = "3s"


class BadCursor(ValueError):
    """A key in the query string that is not one this list wrote."""


class _SqlRow(Func):
    """PostgreSQL's row constructor: `(a, b, c) < (x, y, z)` compares lexicographically, and a
    b-tree on (a, b, c) serves it as one range (an OR of the same conditions it does not)."""

    template = "(%(expressions)s)"
    arg_joiner = ", "
    output_field = models.Field()


@dataclass(frozen=True)
class _Ordering:
    """The list's ordering: field names and one direction for all (a row comparison has one)."""

    fields: tuple[models.Field[Any, Any], ...]
    descending: bool

    @classmethod
    def of(cls, queryset: QuerySet[Any]) -> _Ordering:
        names = [str(name) for name in queryset.query.order_by]
        if not names or not all(isinstance(name, str) for name in queryset.query.order_by):
            raise ValueError("keyset paging needs an ordering by field names")
        descending = {name.startswith("-") for name in names}
        if len(descending) != 1:
            raise ValueError(f"keyset paging needs one direction for every field: {names}")
        opts = queryset.model._meta
        return cls(tuple(opts.get_field(name.lstrip("-")) for name in names), descending.pop())

    def key(self, row: Any) -> list[str]:
        return [field.value_to_string(row) for field in self.fields]

    def past(self, queryset: QuerySet[Any], key: Sequence[str], *, forward: bool
             ) -> QuerySet[Any]:
        """The rows after `key` in the list's order (`forward`), or before it, in that order."""
        columns = _SqlRow(*(F(field.attname) for field in self.fields))
        values = _SqlRow(*(Value(field.to_python(text), output_field=field)
                        for field, text in zip(self.fields, key, strict=True)))
        later = LessThan if self.descending == forward else GreaterThan
        rows = queryset.filter(later(columns, values))
        return rows if forward else rows.reverse()


def page_key(queryset: QuerySet[Any], row: Any) -> str:
    """The key, as a link carries it, of `row` in `queryset`'s order: the page after it starts
    past it (`after`), the page before it ends before it (`before`)."""
    return encode_key(_Ordering.of(queryset).key(row))


def encode_key(key: list[str]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(key)).decode().rstrip("=")


def decode_key(text: str) -> list[str]:
    try:
        key = orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise BadCursor("not a page key") from None
    if not isinstance(key, list) or not all(isinstance(part, str) for part in key):
        raise BadCursor("not a page key")
    return key


class KeysetPaginator:
    """One page of an ordered queryset, fetched once under a statement budget, with one probe
    row: whether another page follows (or, walking back, precedes). Never counts.

    `after` / `before`: the page-key text of the row the page starts after / ends before.
    Without either, page 1 is the first rows and a higher `page_number` is found by OFFSET.
    """

    def __init__(self, queryset: QuerySet[Any], per_page: int, *, page_number: int = 1,
                 after: str | None = None, before: str | None = None) -> None:
        self.queryset = queryset
        self.per_page = per_page
        self.page_number = page_number
        self.after = after
        self.before = before
        self.ordering = _Ordering.of(queryset)
        self.timed_out = False
        self._rows: list[Any] | None = None
        self._probe = False

    def _query(self) -> QuerySet[Any]:
        if self.after is not None:
            return self.ordering.past(self.queryset, decode_key(self.after), forward=True)
        if self.before is not None:
            return self.ordering.past(self.queryset, decode_key(self.before), forward=False)
        return self.queryset

    def rows(self) -> list[Any]:
        """The page's rows (at most `per_page`), in the list's order."""
        if self._rows is None:
            query = self._query()  # a bad key raises BadCursor before any statement
            start = 0
            if self.after is None and self.before is None:
                start = (self.page_number - 1) * self.per_page
            try:
                with transaction.atomic(), connection.cursor() as cursor:
                    cursor.execute("SELECT set_config('statement_timeout', %s, true)",
                                   [LIST_BUDGET])
                    fetched = list(query[start:start + self.per_page + 1])
            except OperationalError:  # the budget ran out (QueryCanceled)
                self.timed_out = True
                fetched = []
            self._probe = len(fetched) > self.per_page
            fetched = fetched[: self.per_page]
            self._rows = fetched[::-1] if self.before is not None else fetched
        return self._rows

    @property
    def has_next(self) -> bool:
        """Whether rows follow this page: the probe row said so, or, on a page reached walking
        back, the page it was reached from follows."""
        rows = self.rows()
        return self.before is not None or self._probe if rows else False

    @property
    def count(self) -> int:
        """What is known without counting: the rows of the pages before and of this one."""
        return (self.page_number - 1) * self.per_page + len(self.rows())

    def next_key(self) -> str | None:
        rows = self.rows()
        return page_key(self.queryset, rows[-1]) if rows and self.has_next else None

    def previous_key(self) -> str | None:
        """The key the previous page ends before; None on the first page (the previous page of
        page 2 is page 1, linked without a key)."""
        rows = self.rows()
        if not rows or self.page_number <= 2:
            return None
        return page_key(self.queryset, rows[0])

    def get_elided_page_range(self, number: int) -> list[int]:
        """Django's `pagination` tag asks for the numbered range of a counted paginator; these
        lists show their own links (UncountedChangeList.page_links), none by number alone."""
        return []
