"""Operators' edits in the Django admin stamp exactly like events do."""

from __future__ import annotations

import uuid

import orjson
import pytest
from django.conf import settings
from django.contrib.admin.models import CHANGE, LogEntry
from django.test import Client

from artifacts.models import Channel, ChannelMember, Community, Event
from tests.factories import add_member, make_channel, make_community, make_key


def _policy(community: Community) -> tuple[object, int]:
    row = Community.objects.values_list("artifact_policy_modified_at", "listing_version")
    return row.get(pk=community.pk)


@pytest.fixture
def community(db: None) -> Community:
    return make_community()


def test_editing_visibility_is_a_stamped_listing_change(
    admin_client: Client, community: Community
) -> None:
    h = make_channel(community, name="general")
    channel = Channel.objects.get(channel_id=h)
    before = _policy(community)
    response = admin_client.post(
        f"/admin/artifacts/channel/{channel.pk}/change/",
        {"name": "general", "visibility": "private"},
    )
    assert response.status_code == 302, response.content
    channel.refresh_from_db()
    assert channel.visibility == "private"
    after = _policy(community)
    assert after[1] == before[1] + 1 and after[0] > before[0]  # type: ignore[operator]

    # A rename alone is not a listing change.
    admin_client.post(f"/admin/artifacts/channel/{channel.pk}/change/",
                      {"name": "renamed", "visibility": "private"})
    assert _policy(community) == after


def test_channel_actions_go_through_the_services(
    admin_client: Client, community: Community
) -> None:
    h = make_channel(community)
    channel = Channel.objects.get(channel_id=h)
    for action, field in [("channel_archive", "archived_at"), ("channel_delete", "deleted_at")]:
        before = _policy(community)
        admin_client.post("/admin/artifacts/channel/",
                          {"action": action, "_selected_action": [channel.pk]})
        channel.refresh_from_db()
        assert getattr(channel, field) is not None
        assert _policy(community)[1] == before[1] + 1


def test_adding_a_channel_makes_its_creator_owner(
    admin_client: Client, community: Community
) -> None:
    owner = make_key()
    h = uuid.uuid4()
    response = admin_client.post("/admin/artifacts/channel/add/", {
        "community": community.pk, "channel_id": str(h), "name": "ops",
        "visibility": "open", "created_by": owner.pubkey,
    })
    assert response.status_code == 302, response.content
    assert ChannelMember.objects.get(channel_id=h).role == "owner"


def test_member_edits_and_deletes_stamp_the_membership(
    admin_client: Client, community: Community
) -> None:
    member = make_key()
    h = make_channel(community, visibility="private")
    add_member(community, h, member)
    row = ChannelMember.objects.get(pubkey=member.pubkey)
    stamp = row.sync_modified_at
    admin_client.post(f"/admin/artifacts/channelmember/{row.pk}/change/", {"role": "admin"})
    row.refresh_from_db()
    assert row.role == "admin" and row.sync_modified_at > stamp
    response = admin_client.post(f"/admin/artifacts/channelmember/{row.pk}/delete/",
                                 {"post": "yes"})
    assert response.status_code == 302
    row.refresh_from_db()  # a soft removal: the row stays, stamped
    assert row.removed_at is not None and row.sync_modified_at > stamp


def test_member_and_channel_edits_are_relay_signed_events_refused_when_archived(
    admin_client: Client, community: Community
) -> None:
    """Staff actions (PROTOCOL.md section 2): a role change is a 9000 and a visibility change a
    9002, signed by the relay; in an archived channel the form refuses them, as the writer
    would, and nothing is stored."""
    member = make_key()
    h = make_channel(community, visibility="private")
    add_member(community, h, member)
    row = ChannelMember.objects.get(pubkey=member.pubkey)
    admin_client.post(f"/admin/artifacts/channelmember/{row.pk}/change/", {"role": "admin"})
    put = Event.objects.get(community=community, kind=9000)
    assert put.pubkey == settings.RELAY_PUBKEY and ["p", member.pubkey, "admin"] in orjson.loads(
        put.raw)["tags"]
    channel = Channel.objects.get(channel_id=h)
    admin_client.post(f"/admin/artifacts/channel/{channel.pk}/change/",
                      {"name": channel.name, "visibility": "open"})
    edit = Event.objects.get(community=community, kind=9002)
    assert edit.pubkey == settings.RELAY_PUBKEY and orjson.loads(edit.raw)["tags"] == [
        ["h", h], ["public"]]

    admin_client.post("/admin/artifacts/channel/",
                      {"action": "channel_archive", "_selected_action": [channel.pk]})
    refused = admin_client.post(f"/admin/artifacts/channelmember/{row.pk}/change/",
                                {"role": "member"})
    assert refused.status_code == 200 and "unarchive it first" in refused.content.decode()
    refused = admin_client.post(f"/admin/artifacts/channel/{channel.pk}/change/",
                                {"name": "renamed", "visibility": "open"})
    assert refused.status_code == 200 and "unarchive it first" in refused.content.decode()
    assert Event.objects.filter(community=community, kind__in=[9000, 9002]).count() == 2
    row.refresh_from_db()
    assert row.role == "admin"


def test_policy_edits_stamp_and_a_rename_does_not(
    admin_client: Client, community: Community
) -> None:
    before = _policy(community)
    data = {"name": "Renamed", "admin_pubkeys": "", "artifacts_enabled": "on",
            "artifact_types": "", "open_channel_creation": ""}
    response = admin_client.post(f"/admin/artifacts/community/{community.pk}/change/", data)
    assert response.status_code == 302, response.content
    assert _policy(community) == before
    admin_client.post(f"/admin/artifacts/community/{community.pk}/change/",
                      {**data, "artifact_types": "buzz.task"})
    community.refresh_from_db()
    assert community.artifact_types == ["buzz.task"]
    assert _policy(community)[1] == before[1] + 1


def test_bad_admin_pubkeys_are_form_errors(admin_client: Client, db: None) -> None:
    response = admin_client.post("/admin/artifacts/community/add/", {
        "host": "new.example", "name": "New", "admin_pubkeys": "nope",
        "artifacts_enabled": "on", "artifact_types": "", "open_channel_creation": "",
    })
    assert response.status_code == 200  # the form again, with its error
    assert not Community.objects.filter(host="new.example").exists()


def test_relay_information_is_edited_in_the_admin_without_stamping(
    admin_client: Client, community: Community
) -> None:
    before = _policy(community)
    data = {"name": community.name, "admin_pubkeys": "", "artifacts_enabled": "on",
            "artifact_types": "", "open_channel_creation": "",
            "description": "Our tasks.", "contact": "mailto:ops@team.example",
            "icon": "https://team.example/icon.png", "banner": "", "terms_of_service": "",
            "privacy_policy": "https://team.example/privacy", "posting_policy": "",
            "max_content_length": "500"}
    page = admin_client.get(f"/admin/artifacts/community/{community.pk}/change/")
    assert "Relay information (NIP-11)" in page.content.decode()
    response = admin_client.post(f"/admin/artifacts/community/{community.pk}/change/", data)
    assert response.status_code == 302, response.content
    community.refresh_from_db()
    assert (community.description, community.contact, community.icon,
            community.privacy_policy, community.max_content_length) == (
        "Our tasks.", "mailto:ops@team.example", "https://team.example/icon.png",
        "https://team.example/privacy", 500)
    assert _policy(community) == before  # information is not policy: nothing stamped

    bad = admin_client.post(f"/admin/artifacts/community/{community.pk}/change/",
                            {**data, "banner": "not a url", "max_content_length": "0"})
    assert bad.status_code == 200  # the form again, with its errors
    assert "must be an http:// or https:// URL" in bad.content.decode()
    assert "max_content_length must be a positive whole number" in bad.content.decode()
    community.refresh_from_db()
    assert community.banner == "" and community.max_content_length == 500


def test_a_community_added_in_the_admin_keeps_its_information(
    admin_client: Client, db: None
) -> None:
    response = admin_client.post("/admin/artifacts/community/add/", {
        "host": "new.example", "name": "New", "admin_pubkeys": "",
        "artifacts_enabled": "on", "artifact_types": "", "open_channel_creation": "",
        "description": "New here.", "terms_of_service": "https://new.example/terms",
    })
    assert response.status_code == 302, response.content
    created = Community.objects.get(host="new.example")
    assert (created.description, created.terms_of_service, created.contact) == (
        "New here.", "https://new.example/terms", "")


def test_channel_actions_are_logged_with_the_staff_user(
    admin_client: Client, community: Community
) -> None:
    h = make_channel(community)
    channel = Channel.objects.get(channel_id=h)
    for action in ("channel_archive", "channel_unarchive", "channel_archive"):
        admin_client.post("/admin/artifacts/channel/",
                          {"action": action, "_selected_action": [channel.pk]})
    # Archiving an archived channel changes nothing, so it is neither stamped nor logged.
    admin_client.post("/admin/artifacts/channel/",
                      {"action": "channel_archive", "_selected_action": [channel.pk]})
    entries = LogEntry.objects.filter(object_id=str(channel.pk)).order_by("id")
    assert [e.get_change_message() for e in entries] == [
        "Archived the channel.", "Unarchived the channel.", "Archived the channel."]
    assert {e.user.username for e in entries} == {"admin"}


def test_member_removal_action_stamps_and_is_logged(
    admin_client: Client, community: Community
) -> None:
    member = make_key()
    h = make_channel(community, visibility="private")
    add_member(community, h, member)
    row = ChannelMember.objects.get(pubkey=member.pubkey)
    stamp = row.sync_modified_at
    admin_client.post("/admin/artifacts/channelmember/",
                      {"action": "remove_members", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert row.removed_at is not None and row.sync_modified_at > stamp
    entry = LogEntry.objects.get(object_id=str(row.pk))
    assert entry.user.username == "admin" and entry.action_flag == CHANGE
    # A staff action: the entry names the staff user and the relay-signed 9001 it stored.
    removal = Event.objects.get(community=community, kind=9001)
    assert removal.pubkey == settings.RELAY_PUBKEY
    assert entry.get_change_message() == (
        f"Removed the member from the channel (relay-signed 9001 {removal.event_id})."
    )
    # The object's history page shows it: the staff user and the relay-signed event.
    history = admin_client.get(f"/admin/artifacts/channelmember/{row.pk}/history/")
    assert history.status_code == 200
    page = history.content.decode()
    assert removal.event_id in page and ">admin<" in page
