"""Heads and revisions in the Django admin: browsed and searched, never edited; moderated.

Both tables can hold millions of rows, so the lists come from `artifacts.admin_browse` (no
COUNT(*), no facets, one ordering an index serves, a statement budget per page). What serves
each filter (artifacts.models and migrations 0076/0078 name the indexes):

heads, ordered newest first along `artifact_heads_modified` (community_id, modified_at,
artifact_id), read backwards, so a page is the first 51 rows of one index walk:
- community: the leading column of every index;
- channel: `artifact_heads_channel` (community_id, channel_id, artifact_id);
- search by artifact or channel id: `artifact_heads_natural_uniq` / `artifact_heads_channel`;
  by event id: `artifact_revisions_natural_uniq` finds the revision, then the head by its key;
- type, deleted, op, author, title: checked row by row along that walk, which stops after a
  page of matches; a rare value on a big table runs into the list budget and the page says to
  narrow by community and channel. No index is added for them: each would be a new concurrent
  build on a production table (readiness knows only the sync indexes), and op, author and title
  are not even columns of heads (they live in the head event and its revision).

revisions, ordered by id descending (the primary key):
- community: residual along the primary key (every revision index leads with community_id, but
  the order is the key's);
- artifact (and search by artifact id): `idx_artifact_revisions_artifact` (community_id,
  artifact_id), the history of one artifact;
- search by event id: `artifact_revisions_natural_uniq` (community_id, event_id);
- channel, op, type, author, title: residual, as above.

Id searches name every community in the lookup (`community_id IN (...)`, a short list), so the
indexes whose first column is community_id serve them without a community filter.

Measured on a million heads and revisions (one community, 200 channels, PostgreSQL 15, a busy
2-core machine): the page's own query takes 5-16 ms unfiltered, by community, channel, type
or artifact id, 260 ms on page 50 by OFFSET (pages now follow keys, artifacts.admin_paging:
bench/admin_paging.py), 0.6 s for one author of 500, 2.7 s for a title matching one head in a
thousand; a value no row has (op delete) runs into the 3 s budget.

Moderation is a staff action (`artifacts.services.staff_actions.staff_redact`, PROTOCOL.md
section 2): a 9005 signed by the relay's key, stored and applied by the writer a person's
redaction goes through, so it is stamped, kept, and streamed live to the subscribers who can
read the channel; readers' next continuation round sees the redaction as a removal. Staff need
no key of their own; each action is recorded in Django's LogEntry with the staff user and the
relay-signed event's id.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.contrib import admin, messages
from django.db.models import Func, OuterRef, Q, QuerySet, Subquery, TextField
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from artifacts.admin_browse import TextFilter, UncountedAdmin
from artifacts.models import ArtifactHead, ArtifactRevision, Channel, Community, Event
from artifacts.services.errors import WriteRefused
from artifacts.services.staff_actions import staff_redact
from nostr.events import HEX64_PATTERN

_PUBKEY = re.compile(HEX64_PATTERN)


class TitleTag(Func):
    """The `title` tag's value of a stored event's JSON (None without one)."""

    template = (
        "(jsonb_path_query_first((%(expressions)s)::jsonb,"
        " 'strict $.tags[*] ? (@[0] == \"title\")') ->> 1)"
    )
    output_field = TextField()


def _event_of_row() -> QuerySet[Event]:
    """The stored event a head or revision row names: one probe of events_community_event_uniq."""
    return Event.objects.filter(
        community_id=OuterRef("community_id"), event_id=OuterRef("event_id")
    )


def _with_event_columns(queryset: QuerySet[Any]) -> QuerySet[Any]:
    events = _event_of_row()
    return queryset.annotate(
        title=Subquery(events.annotate(tag=TitleTag("raw")).values("tag")[:1]),
        author=Subquery(events.values("pubkey")[:1]),
        redacted_at=Subquery(events.values("deleted_at")[:1]),
    )


def _community_ids() -> list[int]:
    return list(Community.objects.values_list("id", flat=True))


def _as_uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


class _CheckedTextFilter(TextFilter):
    """A typed filter whose value is checked; a bad value says so and shows nothing."""

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = (self.value() or "").strip()
        if not value:
            return queryset
        problem = self.problem(value)
        if problem:
            messages.error(request, f"{self.title}: {problem}")
            return queryset.none()
        return self.apply(queryset, value)

    def problem(self, value: str) -> str | None:
        return None


class ChannelFilter(_CheckedTextFilter):
    title = "channel"
    parameter_name = "channel"
    placeholder = "channel UUID"

    def problem(self, value: str) -> str | None:
        return None if _as_uuid(value) else "not a UUID"

    def apply(self, queryset: QuerySet[Any], value: str) -> QuerySet[Any]:
        return queryset.filter(channel_id=_as_uuid(value))


class ArtifactFilter(_CheckedTextFilter):
    title = "artifact"
    parameter_name = "artifact"
    placeholder = "artifact UUID (d tag)"

    def problem(self, value: str) -> str | None:
        return None if _as_uuid(value) else "not a UUID"

    def apply(self, queryset: QuerySet[Any], value: str) -> QuerySet[Any]:
        return queryset.filter(community_id__in=_community_ids(), artifact_id=_as_uuid(value))


class TypeFilter(_CheckedTextFilter):
    title = "type"
    parameter_name = "type"
    placeholder = "e.g. buzz.task"

    def apply(self, queryset: QuerySet[Any], value: str) -> QuerySet[Any]:
        return queryset.filter(artifact_type=value.lower())


class AuthorFilter(_CheckedTextFilter):
    title = "author"
    parameter_name = "author"
    placeholder = "hex pubkey"

    def problem(self, value: str) -> str | None:
        return None if _PUBKEY.match(value.lower()) else "not a 64-character hex pubkey"

    def apply(self, queryset: QuerySet[Any], value: str) -> QuerySet[Any]:
        return queryset.filter(author=value.lower())


class TitleFilter(_CheckedTextFilter):
    title = "title"
    parameter_name = "title"
    placeholder = "part of the title"

    def apply(self, queryset: QuerySet[Any], value: str) -> QuerySet[Any]:
        return queryset.filter(title__icontains=value)


class HeadOpFilter(admin.SimpleListFilter):
    """The op of the head's revision (heads have no op column); choices need no query."""

    title = "op"
    parameter_name = "op"

    def lookups(self, request: HttpRequest, model_admin: Any) -> Any:
        return ArtifactRevision.Op.choices

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(op=value) if value else queryset


def _redact(modeladmin: UncountedAdmin, request: HttpRequest, rows: list[Any], what: str) -> None:
    redacted = refused = 0
    for row in rows:
        try:
            event = staff_redact(community_id=row.community_id, event_id=row.event_id)
        except WriteRefused as exc:
            refused += 1
            modeladmin.message_user(
                request, f"{row.event_id}: not redacted ({exc.ok_message}).", messages.ERROR
            )
            continue
        if event is not None:
            redacted += 1
            modeladmin.log_change(
                request, row, f"Redacted {what} event {row.event_id} (relay-signed {event.kind}"
                f" {event.id})."
            )
    already = len(rows) - redacted - refused
    note = f" ({already} already redacted)" if already else ""
    modeladmin.message_user(request, f"{redacted} event(s) redacted{note}.", messages.SUCCESS)


class _ArtifactRowAdmin(UncountedAdmin):
    search_fields = ["artifact_id"]  # shows the search box; get_search_results does the work

    @admin.display(description="title")
    def title_shown(self, row: Any) -> str:
        return row.title or "-"

    @admin.display(description="author")
    def author_shown(self, row: Any) -> str:
        return format_html('<code title="{}">{}…</code>', row.author or "", (row.author or "")[:12])

    @admin.display(description="op")
    def op_shown(self, row: Any) -> str:
        return row.op or "-"

    @admin.display(description="type")
    def type_shown(self, row: Any) -> str:
        return row.artifact_type or "-"

    @admin.display(description="redacted", boolean=True)
    def redacted(self, row: Any) -> bool:
        return row.redacted_at is not None

    @admin.display(description="event")
    def stored_event(self, row: Any) -> str:
        raw = Event.objects.filter(
            community_id=row.community_id, event_id=row.event_id
        ).values_list("raw", flat=True).first()
        return format_html("<pre style='white-space: pre-wrap'>{}</pre>", raw or "(missing)")


@admin.register(ArtifactHead)
class ArtifactHeadAdmin(_ArtifactRowAdmin):
    list_display = ["artifact_id", "title_shown", "artifact_type", "op_shown", "channel_id",
                    "author_shown", "community", "deleted", "redacted", "modified_at"]
    list_filter = ["community", ChannelFilter, TypeFilter, HeadOpFilter, AuthorFilter, TitleFilter,
                   "deleted"]
    # Served backwards by artifact_heads_modified; (community, artifact_id) is unique, so the
    # order is total and Django adds no primary key to it.
    ordering = ["-community_id", "-modified_at", "-artifact_id"]
    search_help_text = ("An artifact or channel UUID, an event id (any revision of the "
                        "artifact), or part of a title.")
    actions = ["redact_heads"]
    readonly_fields = ["community", "artifact_id", "channel_id", "artifact_type", "event_id",
                       "root", "deleted", "created_at", "modified_at", "history",
                       "stored_event"]

    @admin.display(description="history")
    def history(self, row: ArtifactHead) -> str:
        url = reverse("admin:artifacts_artifactrevision_changelist")
        return format_html('<a href="{}?{}">every revision of this artifact</a>', url,
                           urlencode({"community__id__exact": str(row.community_id),
                                      "artifact": str(row.artifact_id)}))

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        op = ArtifactRevision.objects.filter(
            community_id=OuterRef("community_id"), event_id=OuterRef("event_id")
        ).values("op")[:1]
        rows = super().get_queryset(request).select_related("community")
        return _with_event_columns(rows).annotate(op=Subquery(op))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        if (as_uuid := _as_uuid(term)) is not None:
            # A channel's id or an artifact's, never both (random UUIDs): asking which first
            # keeps each lookup on its own index. As one OR, PostgreSQL expects the thousands
            # of heads of a channel and walks the newest-first index instead (1 s on 1M rows).
            communities = _community_ids()
            if Channel.objects.filter(community_id__in=communities, channel_id=as_uuid).exists():
                return queryset.filter(community_id__in=communities, channel_id=as_uuid), False
            return queryset.filter(community_id__in=communities, artifact_id=as_uuid), False
        if _PUBKEY.match(term.lower()):
            owners = ArtifactRevision.objects.filter(
                community_id__in=_community_ids(), event_id=term.lower()
            ).values_list("community_id", "artifact_id")
            match = Q(pk__in=[])
            for community_id, artifact_id in owners:
                match |= Q(community_id=community_id, artifact_id=artifact_id)
            return queryset.filter(match), False
        return queryset.filter(title__icontains=term), False

    @admin.action(permissions=["moderate"],
                  description="Redact the head event of selected artifacts")
    def redact_heads(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        _redact(self, request, list(queryset), "head")


@admin.register(ArtifactRevision)
class ArtifactRevisionAdmin(_ArtifactRowAdmin):
    list_display = ["event_id", "title_shown", "op", "type_shown", "artifact_id", "channel_id",
                    "author_shown", "community", "redacted", "modified_at"]
    list_filter = ["community", ArtifactFilter, ChannelFilter, TypeFilter, "op", AuthorFilter,
                   TitleFilter]
    ordering = ["-id"]
    search_help_text = "An event id, an artifact UUID, or part of a title."
    actions = ["redact_revisions"]
    readonly_fields = ["community", "event_id", "artifact_id", "channel_id", "op",
                       "prev_event_id", "source_channel_id", "created_at", "modified_at",
                       "stored_event"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        artifact_type = ArtifactHead.objects.filter(
            community_id=OuterRef("community_id"), artifact_id=OuterRef("artifact_id")
        ).values("artifact_type")[:1]
        rows = super().get_queryset(request).select_related("community")
        return _with_event_columns(rows).annotate(artifact_type=Subquery(artifact_type))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        if (as_uuid := _as_uuid(term)) is not None:
            return queryset.filter(community_id__in=_community_ids(), artifact_id=as_uuid), False
        if _PUBKEY.match(term.lower()):
            return queryset.filter(community_id__in=_community_ids(), event_id=term.lower()), False
        return queryset.filter(title__icontains=term), False

    @admin.action(permissions=["moderate"], description="Redact selected revisions")
    def redact_revisions(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        _redact(self, request, list(queryset), "revision")
