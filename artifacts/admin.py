"""Operators' edits of communities, channels and members in the Django admin.

Operators are writers too (PROTOCOL.md section 2): every save, delete and action goes through
the services, so it stamps and counts listing changes exactly like an event would. An action
that has an event kind (a member put or removal, a channel edit or deletion) is a staff action
(`artifacts.services.staff_actions`): the event itself, signed by the relay's key, applied by
the writer a person's event goes through, and logged with the staff user and the event's id.
Fields that only a service may change (stamps, archive and delete times, the listing counter)
are read-only; archive, unarchive, delete and restore are actions. Deleting a channel or member
here is the soft delete the protocol knows (deleted_at, removed_at), never a row deletion.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from artifacts.models import INFO_FIELDS, Channel, ChannelMember, Community
from artifacts.services import channels as channel_services
from artifacts.services.channels import MAX_NAME_CHARS
from artifacts.services.communities import (
    community_create,
    community_update_policy,
    normalize_admins,
    normalize_host,
    normalize_info,
    normalize_types,
)
from artifacts.services.errors import Invalid, WriteRefused
from artifacts.services.staff_actions import (
    staff_channel_delete,
    staff_channel_update,
    staff_member_put,
    staff_member_remove,
)
from artifacts.services.tags import text_value
from nostr.events import Event


def _validated(check: Callable[[Any], Any], value: Any) -> Any:
    try:
        return check(value)
    except Invalid as exc:
        raise forms.ValidationError(exc.message) from None


# What `community_update_policy` takes by name; the NIP-11 fields go to it as `info`.
COMMUNITY_FORM_FIELDS = ["name", "admin_pubkeys", "artifacts_enabled", "artifact_types",
                 "open_channel_creation"]


class CommunityForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = Community
        fields = ["host", *COMMUNITY_FORM_FIELDS, *INFO_FIELDS]
        help_texts = {
            "admin_pubkeys": "comma-separated hex pubkeys",
            "artifact_types": "comma-separated, e.g. buzz.task,buzz.note; empty allows every type",
        }

    def clean_host(self) -> str:
        return str(_validated(normalize_host, self.cleaned_data["host"]))

    def clean_admin_pubkeys(self) -> list[str]:
        return list(_validated(normalize_admins, self.cleaned_data["admin_pubkeys"] or []))

    def clean_artifact_types(self) -> list[str] | None:
        return _validated(normalize_types, self.cleaned_data["artifact_types"] or None)  # type: ignore[no-any-return]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for field_name in INFO_FIELDS:
            if field_name in data:
                try:
                    data.update(normalize_info({field_name: data[field_name]}))
                except Invalid as exc:
                    self.add_error(field_name, exc.message)
        return data


@admin.register(Community)
class CommunityAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = CommunityForm
    list_display = ["host", "name", "artifacts_enabled", "open_channel_creation",
                    "listing_version", "artifact_policy_modified_at"]
    search_fields = ["host", "name"]
    readonly_fields = ["listing_version", "created_at", "artifact_policy_modified_at"]
    fieldsets = [
        (None, {"fields": ["host", *COMMUNITY_FORM_FIELDS, *readonly_fields]}),
        ("Relay information (NIP-11)", {
            "fields": list(INFO_FIELDS),
            "description": "What NIP-11 tells clients of this host. A blank field takes the "
            "deployment's default (RELAY_INFO_DESCRIPTION, RELAY_INFO_CONTACT, ...); one without "
            "a default is left out of the document.",
        }),
    ]

    def get_readonly_fields(self, request: HttpRequest, obj: Community | None = None) -> Any:
        # The host is the community's identity (clients address it by host): fixed once made.
        return [*self.readonly_fields, "host"] if obj is not None else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: Community, form: Any, change: bool) -> None:
        data = form.cleaned_data
        if not change:
            created = community_create(
                host=data["host"], name=data["name"], admin_pubkeys=data["admin_pubkeys"],
                artifacts_enabled=data["artifacts_enabled"],
                artifact_types=data["artifact_types"],
                open_channel_creation=data["open_channel_creation"],
                info={field: data[field] for field in INFO_FIELDS},
            )
            obj.pk = created.pk
            return
        community_update_policy(
            community_id=obj.pk,
            **{field: data[field] for field in form.changed_data if field in COMMUNITY_FORM_FIELDS},
            info={field: data[field] for field in form.changed_data if field in INFO_FIELDS},
        )
        obj.refresh_from_db()


class ChannelForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = Channel
        fields = ["community", "channel_id", "name", "visibility", "created_by"]
        help_texts = {"created_by": "optional pubkey: becomes the channel's owner"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "channel_id" in self.fields:
            self.fields["channel_id"].initial = uuid.uuid4

    def clean_name(self) -> str:
        return str(_validated(
            lambda name: text_value(name, "name", max_chars=MAX_NAME_CHARS),
            self.cleaned_data.get("name") or "",
        ))

    def clean_created_by(self) -> str:
        value = self.cleaned_data.get("created_by") or ""
        return str(_validated(normalize_admins, [value])[0]) if value else ""

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.instance.pk is not None and self.instance.archived_at is not None:
            # An edit is a 9002, which an archived channel refuses (PROTOCOL.md section 2).
            raise forms.ValidationError(ARCHIVED_REFUSAL)
        return data


ARCHIVED_REFUSAL = "the channel is archived: unarchive it first (archived channels take no writes)"


def _logged(text: str, event: Event | None) -> str:
    """A LogEntry message; a staff action's names its relay-signed event (the entry itself
    names the staff user)."""
    return f"{text} (relay-signed {event.kind} {event.id})." if event is not None else f"{text}."


def _refused(admin_: admin.ModelAdmin, request: HttpRequest, what: str,  # type: ignore[type-arg]
             exc: WriteRefused) -> None:
    admin_.message_user(request, f"{what}: not done ({exc.ok_message}).", messages.ERROR)


def _channel_action(service: Callable[..., Any], verb: str, done: str) -> Any:
    """An action over the selected channels; `service` answers whether it changed the channel
    (False or None: it already had), with a staff action's event when it made one."""

    def action(admin_: ChannelAdmin, request: HttpRequest, queryset: QuerySet[Channel]) -> None:
        changed = 0
        for channel in queryset:
            try:
                outcome = service(community_id=channel.community_id, channel_id=channel.channel_id)
            except WriteRefused as exc:
                _refused(admin_, request, f"channel {channel.channel_id}", exc)
                continue
            if outcome:
                changed += 1
                event = outcome if isinstance(outcome, Event) else None
                admin_.log_change(request, channel, _logged(f"{verb.capitalize()}d the channel",
                                                            event))
        admin_.message_user(request, f"{changed} channel(s) {done}.", messages.SUCCESS)

    action.__name__ = f"channel_{verb}"
    return admin.action(description=f"{verb.capitalize()} selected channels")(action)


@admin.register(Channel)
class ChannelAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = ChannelForm
    list_display = ["channel_id", "name", "community", "visibility", "archived_at", "deleted_at"]
    list_filter = ["community", "visibility"]
    search_fields = ["name", "channel_id"]
    actions = [
        _channel_action(channel_services.channel_archive, "archive", "archived"),
        _channel_action(channel_services.channel_unarchive, "unarchive", "unarchived"),
        _channel_action(staff_channel_delete, "delete", "deleted"),
        _channel_action(channel_services.channel_restore, "restore", "restored"),
    ]
    readonly_fields = ["created_at", "archived_at", "deleted_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Channel | None = None) -> Any:
        fixed = ["community", "channel_id", "created_by"] if obj is not None else []
        return [*fixed, *self.readonly_fields]

    def save_model(self, request: HttpRequest, obj: Channel, form: Any, change: bool) -> None:
        if change:
            # Checked by the form (archived channels are refused); a race answers here.
            try:
                _, event = staff_channel_update(
                    community_id=obj.community_id, channel_id=obj.channel_id,
                    name=obj.name, visibility=obj.visibility,
                )
            except WriteRefused as exc:
                _refused(self, request, f"channel {obj.channel_id}", exc)
                return
            if event is not None:
                self.log_change(request, obj, _logged("Edited the channel", event))
        else:
            channel_services.channel_create(
                community_id=obj.community_id, channel_id=obj.channel_id, name=obj.name,
                visibility=obj.visibility, created_by=obj.created_by,
            )
        obj.pk = Channel.objects.get(
            community_id=obj.community_id, channel_id=obj.channel_id
        ).pk

    def delete_model(self, request: HttpRequest, obj: Channel) -> None:
        try:
            event = staff_channel_delete(community_id=obj.community_id,
                                         channel_id=obj.channel_id)
        except WriteRefused as exc:
            _refused(self, request, f"channel {obj.channel_id}", exc)
            return
        if event is not None:
            self.log_change(request, obj, _logged("Deleted the channel", event))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Channel]) -> None:
        for channel in queryset:
            self.delete_model(request, channel)


class ChannelMemberForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = ChannelMember
        fields = ["community", "channel_id", "pubkey", "role"]

    def clean_pubkey(self) -> str:
        return str(_validated(normalize_admins, [self.cleaned_data["pubkey"]])[0])

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        community = data.get("community") or getattr(self.instance, "community", None)
        channel_id = data.get("channel_id") or self.instance.channel_id
        if community is None or channel_id is None:
            return data
        archived = Channel.objects.filter(
            community=community, channel_id=channel_id, deleted_at__isnull=True
        ).values_list("archived_at", flat=True)
        if not archived.exists():
            raise forms.ValidationError({"channel_id": "no such channel in this community"})
        if archived.first() is not None:
            # A put is a 9000, which an archived channel refuses (PROTOCOL.md section 2).
            raise forms.ValidationError(ARCHIVED_REFUSAL)
        return data


@admin.register(ChannelMember)
class ChannelMemberAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = ChannelMemberForm
    list_display = ["pubkey", "channel_id", "community", "role", "removed_at",
                    "sync_modified_at"]
    list_filter = ["community", "role"]
    search_fields = ["pubkey", "channel_id"]
    readonly_fields = ["joined_at", "removed_at", "sync_modified_at"]
    actions = ["remove_members", "rejoin_members"]

    def get_readonly_fields(self, request: HttpRequest, obj: ChannelMember | None = None) -> Any:
        fixed = ["community", "channel_id", "pubkey"] if obj is not None else []
        return [*fixed, *self.readonly_fields]

    def save_model(
        self, request: HttpRequest, obj: ChannelMember, form: Any, change: bool
    ) -> None:
        # Saving is a put: grant, rejoin or role change (a no-op save stores nothing).
        try:
            event = staff_member_put(community_id=obj.community_id, channel_id=obj.channel_id,
                                     pubkey=obj.pubkey, role=obj.role)
        except WriteRefused as exc:
            _refused(self, request, f"member {obj.pubkey}", exc)
            return
        obj.pk = ChannelMember.objects.get(
            community_id=obj.community_id, channel_id=obj.channel_id, pubkey=obj.pubkey
        ).pk
        if event is not None:
            self.log_change(request, obj, _logged(f"Put the member as {obj.role}", event))

    def delete_model(self, request: HttpRequest, obj: ChannelMember) -> None:
        self._remove(request, obj)

    def _remove(self, request: HttpRequest, member: ChannelMember) -> None:
        # The row stays (removed_at): the removal is a change of it, logged as one.
        try:
            event = staff_member_remove(community_id=member.community_id,
                                        channel_id=member.channel_id, pubkey=member.pubkey)
        except WriteRefused as exc:
            _refused(self, request, f"member {member.pubkey}", exc)
            return
        if event is not None:
            self.log_change(request, member, _logged("Removed the member from the channel",
                                                     event))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ChannelMember]) -> None:
        for member in queryset:
            self.delete_model(request, member)

    @admin.action(description="Remove selected members")
    def remove_members(self, request: HttpRequest, queryset: QuerySet[ChannelMember]) -> None:
        for member in queryset:
            self._remove(request, member)

    @admin.action(description="Rejoin selected members (same role)")
    def rejoin_members(self, request: HttpRequest, queryset: QuerySet[ChannelMember]) -> None:
        for member in queryset:
            try:
                event = staff_member_put(community_id=member.community_id,
                                         channel_id=member.channel_id, pubkey=member.pubkey,
                                         role=member.role)
            except WriteRefused as exc:
                _refused(self, request, f"member {member.pubkey}", exc)
                continue
            if event is not None:
                self.log_change(request, member,
                                _logged(f"Rejoined the member as {member.role}", event))


# Heads and revisions: browsing and moderation (registered on import).
from artifacts import admin_artifacts  # noqa: E402, F401
