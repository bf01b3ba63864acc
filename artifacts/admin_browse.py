"""Browsing the artifact tables in the Django admin when they hold millions of rows.

Django's change list counts: `paginator.count` is a COUNT(*) of the filtered table, and
`show_full_result_count` a second one of the whole table; on `artifact_heads` with a million rows
each is a full scan per page view. The pieces here page without counting (Django has no such
paginator, and no well-kept package offers one for the admin, so it is written here):

- `KeysetPaginator` (artifacts.admin_paging) fetches one row more than a page, under a statement
  budget, from the previous page's last key (no OFFSET), and knows only whether another page
  follows;
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
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import PAGE_VAR, ChangeList
from django.db import connection
from django.db.models import QuerySet
from django.http import HttpRequest

from artifacts.admin_paging import AFTER_VAR, BEFORE_VAR, LIST_BUDGET, BadCursor, KeysetPaginator
from relaycore.admin import ReadOnlyAdmin


def estimated_rows(table: str) -> int | None:
    """PostgreSQL's estimate of a table's rows (None before the first VACUUM or ANALYZE)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)", [table])
        row = cursor.fetchone()
    if row is None or row[0] is None or row[0] < 0:
        return None
    return int(row[0])


class UncountedChangeList(ChangeList):
    """Django's change list with one page fetched by `KeysetPaginator` and nothing counted."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None
                     ) -> QuerySet[Any]:
        # The page keys are the page's, like Django's `p`: kept out of the parameters every
        # other link (filters, search, the first page) is built from, and out of the filters.
        # ChangeList.__init__ calls this after reading them and before get_results.
        for name in (AFTER_VAR, BEFORE_VAR):
            self.params.pop(name, None)
            self.filter_params.pop(name, None)
        return super().get_queryset(request, exclude_parameters)

    def get_results(self, request: HttpRequest) -> None:
        self.page_num = max(1, int(self.page_num))  # ?p=0 or ?p=-3: the first page
        paginator = KeysetPaginator(
            self.queryset, self.list_per_page, page_number=self.page_num,
            after=request.GET.get(AFTER_VAR), before=request.GET.get(BEFORE_VAR),
        )
        try:
            rows = paginator.rows()
        except BadCursor:
            raise IncorrectLookupParameters("no such page") from None
        if paginator.timed_out:
            messages.warning(
                request,
                f"The page took longer than {LIST_BUDGET}: a filter checked row by row found too "
                "few matches. Choose a community and a channel (or search an id) first.",
            )
        if not rows and self.page_num > 1:
            raise IncorrectLookupParameters("no such page")
        self.result_count = paginator.count
        self.full_result_count = None
        self.show_full_result_count = False
        self.show_admin_actions = True
        self.result_list = rows  # type: ignore[assignment]
        self.can_show_all = False
        self.has_more = paginator.has_next
        self.multi_page = self.has_more or self.page_num > 1
        self.paginator = paginator  # type: ignore[assignment]
        self.estimated_total = estimated_rows(self.model._meta.db_table)
        self.page_links = page_links(self, paginator)
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


def page_links(changelist: UncountedChangeList, paginator: KeysetPaginator
               ) -> list[tuple[str, str | None]]:
    """(label, query string; None for the page shown) of the first page, the previous one,
    this one and the next: each reached by its key, so no link asks for an OFFSET."""
    number = changelist.page_num
    links: list[tuple[str, str | None]] = []
    if number > 1:
        links.append(("1", changelist.get_query_string()))
    if (previous := paginator.previous_key()) is not None:
        links.append((str(number - 1), changelist.get_query_string(
            {PAGE_VAR: number - 1, BEFORE_VAR: previous})))
    links.append((str(number), None))
    if (following := paginator.next_key()) is not None:
        links.append((str(number + 1), changelist.get_query_string(
            {PAGE_VAR: number + 1, AFTER_VAR: following})))
    return links
