"""Every change a round would deliver is heard live (PROTOCOL.md section 8): redactions to a
REQ naming kind 9005, live only and only for readable channels; a change of the subscriber's own
access as its stored event, a CLOSED or a NOTICE `changed:`; and staff actions in the console
(relay-signed events, PROTOCOL.md section 2) heard like the same event from a person."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.test import Client

from artifacts.models import ArtifactHead, Channel, ChannelMember
from tests.artifacts.ws.wsclient import NostrWs
from tests.factories import (
    create_artifact,
    make_channel,
    make_community,
    make_key,
    redact,
    signed_event,
    write,
)
from tests.relay_server import RelayProcess

pytestmark = pytest.mark.django_db(transaction=True)

# The bound within which a live change must arrive, the same for a person's event and the
# console's (the socket's receive timeout; nothing here times the relay more tightly).
BOUND = 10.0


def _eose(ws: NostrWs, sub_id: str, *filters: dict[str, Any]) -> list[list[Any]]:
    ws.req(sub_id, *filters)
    frames = ws.recv_until(lambda f: f[0] in ("EOSE", "CLOSED") and f[1] == sub_id)
    assert frames[-1] == ["EOSE", sub_id], frames
    return frames[:-1]


def _event_on(
    ws: NostrWs, sub_id: str, event_id: str | None = None, *, since: float | None = None
) -> tuple[dict[str, Any], float]:
    """The next EVENT on `sub_id` (with `event_id`), and the seconds since `since`."""
    started = time.monotonic() if since is None else since
    frames = ws.recv_until(
        lambda f: f[0] == "EVENT" and f[1] == sub_id
        and (event_id is None or f[2]["id"] == event_id),
        BOUND,
    )
    return frames[-1][2], time.monotonic() - started


def _mentions(frames: list[list[Any]], text: str) -> bool:
    return any(text in repr(frame) for frame in frames)


def test_redactions_stream_live_to_readers_only_and_are_never_replayed(
    relay_server: RelayProcess,
) -> None:
    community = make_community()
    alice, bob, carol = make_key(), make_key(), make_key()
    private = make_channel(community, owner=alice, visibility="private", members=[bob])
    lobby = make_channel(community, owner=alice, name="lobby")
    _, secret_head = create_artifact(community, alice, private, title="secret plan")
    _, lobby_head = create_artifact(community, alice, lobby)
    _, old_head = create_artifact(community, alice, lobby)
    old_redaction = redact(community, alice, lobby, old_head).event_id

    bob_ws, carol_ws = NostrWs(relay_server.port), NostrWs(relay_server.port)
    bob_ws.auth(bob)
    carol_ws.auth(carol)
    # Never replayed: the stored redaction is not in the replay, only the readable head.
    replayed = _eose(bob_ws, "both", {"kinds": [45010, 9005], "#h": [private, lobby]})
    assert {f[2]["id"] for f in replayed} == {secret_head, lobby_head}
    _eose(bob_ws, "default", {"#h": [private, lobby]})  # no kinds: 45010/45011 only
    _eose(carol_ws, "all", {"kinds": [9005]})
    _eose(carol_ws, "named", {"kinds": [9005], "#h": [private, lobby]})

    secret_redaction = redact(community, alice, private, secret_head).event_id
    event, _ = _event_on(bob_ws, "both", secret_redaction)
    assert event["kind"] == 9005 and ["e", secret_head] in event["tags"]
    lobby_redaction = redact(community, alice, lobby, lobby_head).event_id
    assert _event_on(bob_ws, "both", lobby_redaction)[0]["kind"] == 9005
    for sub in ("all", "named"):
        assert _event_on(carol_ws, sub, lobby_redaction)[0]["pubkey"] == alice.pubkey

    later = bob_ws.expect_quiet(0.5)
    assert not [f for f in later if f[0] == "EVENT" and f[1] == "default"]
    # Hidden leak: carol never hears of the private channel or its redaction.
    heard = carol_ws.expect_quiet(0.5)
    assert not _mentions(heard, private) and not _mentions(heard, secret_redaction)
    assert old_redaction not in repr(heard)
    bob_ws.close()
    carol_ws.close()


def test_access_hints_reach_only_those_whose_access_changed(relay_server: RelayProcess) -> None:
    community = make_community()
    alice, carol, dave = make_key(), make_key(), make_key()
    team = make_channel(community, owner=alice, visibility="private", name="team")
    hidden = make_channel(community, owner=alice, visibility="private", name="hidden")
    lobby = make_channel(community, owner=alice, name="lobby")
    create_artifact(community, alice, hidden)

    carol_ws, dave_ws = NostrWs(relay_server.port), NostrWs(relay_server.port)
    carol_ws.auth(carol)
    dave_ws.auth(dave)
    _eose(carol_ws, "every", {"kinds": [45010]})
    _eose(carol_ws, "grants", {"kinds": [9000]})
    _eose(dave_ws, "every", {})

    # Carol's own grant: the REQ naming 9000 gets the stored event, the other a NOTICE.
    grant = write(community, alice, 9000, [["h", team], ["p", carol.pubkey]]).event_id
    frames = carol_ws.recv_until(lambda f: f[0] == "NOTICE", BOUND)
    assert frames[-1][1].startswith(f"changed: {team} member")
    assert _event_on(carol_ws, "grants", grant)[0]["kind"] == 9000
    # Someone else's membership is not dave's to hear; a lobby grant is not carol's either.
    write(community, alice, 9000, [["h", lobby], ["p", make_key().pubkey]])
    # A private channel neither could ever read, deleted: heard by nobody (hidden leak).
    write(community, alice, 9008, [["h", hidden]])
    assert not _mentions(carol_ws.expect_quiet(0.5), hidden)
    assert dave_ws.expect_quiet(0.3) == []

    # A channel made public: everyone covering it hears it, since everyone can read it now.
    write(community, alice, 9002, [["h", team], ["public"]])
    for ws in (carol_ws, dave_ws):
        frames = ws.recv_until(lambda f: f[0] == "NOTICE", BOUND)
        assert frames[-1][1].startswith(f"changed: {team} public")
    carol_ws.close()
    dave_ws.close()


def _console(staff: Client, path: str, action: str, pk: int) -> float:
    """Run a console action on one row; the seconds the admin's request took."""
    started = time.monotonic()
    response = staff.post(path, {"action": action, "_selected_action": [pk], "index": 0})
    assert response.status_code == 302, response.content[:2000]
    return time.monotonic() - started


def test_console_actions_are_heard_like_a_persons_events(
    relay_server: RelayProcess, admin_client: Client
) -> None:
    community = make_community()
    alice, bob = make_key(), make_key()
    private = make_channel(community, owner=alice, visibility="private", members=[bob])
    lobby = make_channel(community, owner=alice, name="lobby")
    _, by_person = create_artifact(community, alice, lobby)
    d, by_staff = create_artifact(community, alice, lobby)

    ws = NostrWs(relay_server.port)
    ws.auth(bob)
    _eose(ws, "both", {"kinds": [45010, 9005], "#h": [private, lobby]})
    _eose(ws, "removals", {"kinds": [45010, 9001], "#h": [private]})
    _eose(ws, "deletions", {"kinds": [45010, 9008], "#h": [lobby]})

    # A redaction: a person's, then the console's, each heard within the bound.
    person = NostrWs(relay_server.port)
    person.auth(alice)
    started = time.monotonic()
    assert person.publish(signed_event(alice, 9005, [["h", lobby], ["e", by_person]]))[2]
    _, person_took = _event_on(ws, "both", since=started)
    head = ArtifactHead.objects.get(community=community, artifact_id=d)
    started = time.monotonic()
    request_took = _console(admin_client, "/admin/artifacts/artifacthead/", "redact_heads",
                            head.pk)
    redaction, staff_took = _event_on(ws, "both", since=started)
    assert redaction["pubkey"] == settings.RELAY_PUBKEY and ["e", by_staff] in redaction["tags"]
    print(f"redaction heard after {person_took:.3f} s (person), {staff_took:.3f} s (console,"
          f" whose admin request took {request_took:.3f} s)")

    # A member removal: the REQ naming 9001 gets the relay-signed event, then its CLOSED (it
    # named only that channel); the other subscription, still reading the lobby, a NOTICE.
    member = ChannelMember.objects.get(community=community, channel_id=private,
                                       pubkey=bob.pubkey)
    _console(admin_client, "/admin/artifacts/channelmember/", "remove_members", member.pk)
    frames = ws.recv_until(lambda f: f[0] == "CLOSED" and f[1] == "removals", BOUND)
    assert frames[-1][2].startswith("restricted:")
    (removal,) = [f[2] for f in frames if f[0] == "EVENT" and f[1] == "removals"]
    assert removal["kind"] == 9001 and removal["pubkey"] == settings.RELAY_PUBKEY
    assert ["p", bob.pubkey] in removal["tags"]
    notices = [f[1] for f in frames if f[0] == "NOTICE"]
    assert len(notices) == 1 and notices[0].startswith(f"changed: {private} member"), frames

    # A channel deletion: the relay-signed 9008 to the REQ naming it, CLOSED to both.
    channel = Channel.objects.get(community=community, channel_id=lobby)
    _console(admin_client, "/admin/artifacts/channel/", "channel_delete", channel.pk)
    frames = ws.recv_until(lambda f: f[0] == "CLOSED" and f[1] == "both", BOUND)
    frames += ws.recv_until(lambda f: f[0] == "CLOSED" and f[1] == "deletions", BOUND) if not [
        f for f in frames if f[0] == "CLOSED" and f[1] == "deletions"] else []
    (deletion,) = [f[2] for f in frames if f[0] == "EVENT" and f[1] == "deletions"]
    assert deletion["kind"] == 9008 and deletion["pubkey"] == settings.RELAY_PUBKEY

    # Each LogEntry names the staff user and the relay-signed event it stored.
    entries = {e.get_change_message(): e.user.username for e in LogEntry.objects.all()}
    for event in (redaction, removal, deletion):
        assert [user for text, user in entries.items() if event["id"] in text] == ["admin"]
    ws.close()
    person.close()


def _notice_about(frame: list[Any], channel: str, change: str = "") -> bool:
    """A NOTICE about `channel` (and `change`): a "created" notice of a channel made before the
    subscription may still arrive after it, and is not the one awaited."""
    return (frame[0] == "NOTICE" and frame[1].startswith(f"changed: {channel}")
            and change in frame[1])


def test_console_archive_and_restore_announce_their_commit(
    relay_server: RelayProcess, admin_client: Client
) -> None:
    """Actions with no kind reach the subscribers who can read the channel as a NOTICE."""
    community = make_community()
    alice, bob = make_key(), make_key()
    lobby = make_channel(community, owner=alice, name="lobby")
    spare = make_channel(community, owner=alice, name="spare")
    ws = NostrWs(relay_server.port)
    ws.auth(bob)
    _eose(ws, "every", {})
    channel = Channel.objects.get(community=community, channel_id=lobby)
    _console(admin_client, "/admin/artifacts/channel/", "channel_archive", channel.pk)
    frames = ws.recv_until(lambda f: _notice_about(f, lobby, "archived"), BOUND)
    assert frames[-1][1].startswith(f"changed: {lobby} archived")
    write(community, alice, 9008, [["h", spare]])
    frames = ws.recv_until(lambda f: _notice_about(f, spare, "deleted"), BOUND)
    assert frames[-1][1].startswith(f"changed: {spare} deleted")
    spare_row = Channel.objects.get(community=community, channel_id=spare)
    _console(admin_client, "/admin/artifacts/channel/", "channel_restore", spare_row.pk)
    frames = ws.recv_until(lambda f: _notice_about(f, spare, "restored"), BOUND)
    assert frames[-1][1].startswith(f"changed: {spare} restored")
    assert uuid.UUID(spare)  # the notice names the channel by its canonical id
    ws.close()
