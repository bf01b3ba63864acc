"""Browsing the artifact tables in the Django admin when they hold millions of rows.

Django's change list counts: `paginator.count` is a COUNT(*) of the filtered table, and
`show_full_result_count` a second one of the whole table; on `artifact_heads` with a million rows
each is a full scan per page view. The pieces here page without counting (Django has no such
paginator, and no well-kept package offers one for the admin, so it is written here):

- `UncountedPaginator` fetches one row more than a page, under a statement budget, and knows only
  whether another page follows;
- `UncountedChangeList` shows those rows and PostgreSQL's own estimate of the table's size
  (`pg_class.reltuples`, kept by VACUUM and ANALYZE), never a count;
- `TextFilter` is a sidebar filter typed in (a channel, a type, an author, a title): Django's
  field filters list their choices with SELECT DISTINCT over the table, another full scan.

Which filters an index serves is stated on each admin (artifacts.admin); the rest are checked
row by row along the index the list is ordered by, which stops after a page of matches, and the
statement budget bounds a rare value's walk.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import EmptyPage, Page, PageNotAnInteger, Paginator
from django.db import OperationalError, connection, transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from relayinfo.admin import ReadOnlyAdmin

# Long enough for any page an index serves (milliseconds), short enough that a filter on a rare
# value cannot hold a connection: the operator is told to narrow by community and channel.
LIST_BUDGET = "3s"


class UncountedPaginator(Paginator):
    """A paginator that never counts: page N is rows [(N-1)*size, N*size] plus one probe row.

    `count` is what is known without counting: the rows before this page plus the rows fetched,
    so `num_pages` is this page, or this page plus one when the probe row came back.
    """

    def __init__(self, object_list: Any, per_page: int, *, page_number: int = 1) -> None:
        super().__init__(object_list, per_page)
        self.page_number = page_number
        self.timed_out = False
        self._rows: list[Any] | None = None

    def _fetch(self) -> list[Any]:
        if self._rows is None:
            start = (self.page_number - 1) * self.per_page
            try:
                with transaction.atomic(), connection.cursor() as cursor:
                    cursor.execute("SELECT set_config('statement_timeout', %s, true)",
                                   [LIST_BUDGET])
                    self._rows = list(self.object_list[start:start + self.per_page + 1])
            except OperationalError:  # the budget ran out (QueryCanceled)
                self.timed_out = True
                self._rows = []
        return self._rows

    @property
    def count(self) -> int:  # type: ignore[override]
        return (self.page_number - 1) * self.per_page + len(self._fetch())

    @property
    def has_more(self) -> bool:
        return len(self._fetch()) > self.per_page

    def page(self, number: Any) -> Page:  # type: ignore[type-arg]
        number = self.validate_number(number)
        if number != self.page_number:
            raise EmptyPage("only the requested page is fetched")
        return Page(self._fetch()[: self.per_page], number, self)

    def validate_number(self, number: Any) -> int:
        try:
            value = int(number)
        except (TypeError, ValueError):
            raise PageNotAnInteger("That page number is not an integer") from None
        if value < 1:
            raise EmptyPage("That page number is less than 1")
        return value


def estimated_rows(table: str) -> int | None:
    """PostgreSQL's estimate of a table's rows (None before the first VACUUM or ANALYZE)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)", [table])
        row = cursor.fetchone()
    if row is None or row[0] is None or row[0] < 0:
        return None
    return int(row[0])


class UncountedChangeList(ChangeList):
    """Django's change list with one page fetched by `UncountedPaginator` and nothing counted."""

    def get_results(self, request: HttpRequest) -> None:
        self.page_num = max(1, int(self.page_num))  # ?p=0 or ?p=-3: the first page
        paginator = UncountedPaginator(self.queryset, self.list_per_page, page_number=self.page_num)
        rows = paginator._fetch()
        if paginator.timed_out:
            messages.warning(
                request,
                f"The page took longer than {LIST_BUDGET}: a filter checked row by row found too "
                "few matches. Choose a community and a channel (or search an id) first.",
            )
        if not rows and self.page_num > 1:
            from django.contrib.admin.options import IncorrectLookupParameters

            raise IncorrectLookupParameters("no such page")
        self.result_count = paginator.count
        self.full_result_count = None
        self.show_full_result_count = False
        self.show_admin_actions = True
        self.result_list = rows[: self.list_per_page]  # type: ignore[assignment]
        self.can_show_all = False
        self.multi_page = paginator.has_more or self.page_num > 1
        self.paginator = paginator
        self.estimated_total = estimated_rows(self.model._meta.db_table)
        self.has_more = paginator.has_more
        self.page_links = pages_around(self)
        self.page_label = page_label(self)

    def get_ordering_field_columns(self) -> dict[int, Any]:
        # No column is sortable, so no header is marked as the sorted one.
        return {}

    def get_ordering(self, request: HttpRequest, queryset: QuerySet[Any]) -> list[Any]:
        # Only the admin's own ordering, which an index serves: a crafted `?o=` would sort
        # the whole table.
        return list(self.model_admin.get_ordering(request))


class UncountedAdmin(ReadOnlyAdmin):
    """Read-only browsing of a big table: no counts, no facets, no sorting but the indexed one.

    Column sorting is off (`sortable_by`): only `ordering`, which an index serves, is offered.
    The selection counter is off, so "select all N" (an action over the whole filtered table)
    is never offered.
    """

    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    actions_selection_counter = False
    sortable_by = ()
    list_per_page = 50

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return UncountedChangeList

    def has_moderate_permission(self, request: HttpRequest) -> bool:
        """Moderation actions: staff with Django's change permission on the model."""
        opts = self.opts
        return bool(request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}"))


class TextFilter(admin.SimpleListFilter):
    """A sidebar filter whose value is typed in; `apply` turns it into a queryset filter."""

    template = "admin/artifacts/text_filter.html"
    placeholder = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # One entry so Django renders the filter; the template shows a text box instead.
        return [("", "")]

    def choices(self, changelist: Any) -> Iterator[Any]:
        others = [
            (key, value)
            for key, values in changelist.get_filters_params().items()
            if key != self.parameter_name
            for value in (values if isinstance(values, list) else [values])
        ]
        yield {
            "value": self.value() or "",
            "others": others,
            "clear_url": changelist.get_query_string(remove=[self.parameter_name]),
            "placeholder": self.placeholder,
        }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = (self.value() or "").strip()
        return self.apply(queryset, value) if value else queryset

    def apply(self, queryset: QuerySet[Any], value: str) -> QuerySet[Any]:
        raise NotImplementedError


def page_label(changelist: UncountedChangeList) -> str:
    """What the pagination line says instead of a count."""
    shown = len(changelist.result_list)
    first = (changelist.page_num - 1) * changelist.list_per_page + 1 if shown else 0
    parts = [f"rows {first}-{first + shown - 1}" if shown else "no rows"]
    if changelist.has_more:
        parts.append("more follow")
    if changelist.estimated_total is not None:
        parts.append(f"about {changelist.estimated_total:,} in the table (PostgreSQL's estimate)")
    return ", ".join(parts)


def pages_around(changelist: UncountedChangeList) -> list[int]:
    """Page links: the first, a few before this one, this one and the next when it exists."""
    last = changelist.page_num + (1 if changelist.has_more else 0)
    first_near = max(1, changelist.page_num - 3)
    return sorted({1, *range(first_near, last + 1)})
