"""Heads and revisions in the Django admin: browsed without counting, filtered by what indexes
serve, and moderated through the writers so readers' rounds see the redaction."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from django.contrib import admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext

from artifacts.admin_artifacts import ArtifactHeadAdmin
from artifacts.models import ArtifactHead, ArtifactRevision, Community, Event
from relayinfo.readiness import forget_cached_readiness
from tests.factories import (
    Key,
    create_artifact,
    delete_artifact,
    make_channel,
    make_community,
    make_key,
    signed_post,
    update_artifact,
)

pytestmark = pytest.mark.django_db(transaction=True)
HOST = "team.example"
HEADS = "/admin/artifacts/artifacthead/"
REVISIONS = "/admin/artifacts/artifactrevision/"


@dataclass
class World:
    community: Community
    alice: Key
    bob: Key
    general: str
    design: str
    plan: str  # d of "Launch plan" by alice in general (updated once)
    plan_head: str
    sketch: str  # d of "Logo sketch" by bob in design, type buzz.note
    gone: str  # d of a deleted task in general


@pytest.fixture
def world() -> World:
    community = make_community(HOST)
    alice, bob = make_key(), make_key()
    general = make_channel(community, name="general", owner=alice)
    design = make_channel(community, name="design", owner=bob)
    plan, first = create_artifact(community, alice, general, title="Launch plan")
    plan_head = update_artifact(community, alice, plan, general, prev=first, title="Launch plan v2")
    sketch, _ = create_artifact(community, bob, design, type="buzz.note", title="Logo sketch")
    gone, gone_head = create_artifact(community, alice, general, title="Old chore")
    delete_artifact(community, alice, gone, general, prev=gone_head)
    return World(community, alice, bob, general, design, plan, plan_head, sketch, gone)


@pytest.fixture
def staff() -> Client:
    user = User.objects.create_superuser("operator", password="correct horse")
    client = Client()
    client.force_login(user)
    return client


def _listed(client: Client, path: str, query: dict[str, str] | None = None) -> str:
    """The list page's HTML, asserting no query counted anything."""
    with CaptureQueriesContext(connection) as queries:
        response = client.get(path, query or {})
    assert response.status_code == 200, response.content[:2000]
    counting = [q["sql"] for q in queries if "COUNT(" in q["sql"].upper()]
    assert counting == []
    return response.content.decode()


def test_head_list_shows_titles_authors_types_and_ops_without_counting(
    world: World, staff: Client
) -> None:
    page = _listed(staff, HEADS)
    for text in ("Launch plan v2", "Logo sketch", "buzz.note", world.plan, world.sketch):
        assert text in page
    assert world.alice.pubkey[:12] in page and world.bob.pubkey[:12] in page
    assert "Launch plan<" not in page  # the head's title, not the first revision's
    assert "rows 1-3" in page and "more follow" not in page
    assert re.search(r"\d+ (results?|total)\b", page) is None  # no count anywhere


# (query, titles shown, texts absent); one test, so the world is built once for all of them.
HEAD_FILTERS: list[tuple[dict[str, str], list[str], list[str]]] = [
    ({"channel": "design"}, ["Logo sketch"], ["Launch plan v2"]),
    ({"type": "buzz.note"}, ["Logo sketch"], ["Launch plan v2"]),
    ({"title": "LAUNCH"}, ["Launch plan v2"], ["Logo sketch"]),
    ({"op": "delete"}, ["gone"], ["Launch plan v2", "Logo sketch"]),
    ({"author": "bob"}, ["Logo sketch"], ["Launch plan v2"]),
    ({"deleted__exact": "0"}, ["Launch plan v2", "Logo sketch"], [">delete<"]),
]


def test_head_filters_narrow_the_list(world: World, staff: Client) -> None:
    named = {"design": world.design, "bob": world.bob.pubkey, "gone": world.gone}
    for query, present, absent in HEAD_FILTERS:
        page = _listed(staff, HEADS, {key: named.get(v, v) for key, v in query.items()})
        for text in present:
            assert named.get(text, text) in page, (query, text)
        for text in absent:
            assert text not in page, (query, text)


def test_head_search_finds_by_artifact_channel_event_id_and_title(
    world: World, staff: Client
) -> None:
    first_revision = ArtifactRevision.objects.get(artifact_id=world.plan, op="create").event_id
    for term in (world.plan, world.general, first_revision, "plan v2"):
        page = _listed(staff, HEADS, {"q": term})
        assert "Launch plan v2" in page and "Logo sketch" not in page, term
    assert "Logo sketch" in _listed(staff, HEADS, {"q": world.design})


def test_revision_list_filters_by_artifact_op_and_author(world: World, staff: Client) -> None:
    history = _listed(staff, REVISIONS, {"artifact": world.plan})
    assert "Launch plan v2" in history and "Launch plan<" in history
    assert "Logo sketch" not in history
    updates = _listed(staff, REVISIONS, {"op__exact": "update"})
    assert "Launch plan v2" in updates and "Logo sketch" not in updates
    by_bob = _listed(staff, REVISIONS, {"author": world.bob.pubkey, "type": "buzz.note"})
    assert "Logo sketch" in by_bob and "Launch plan" not in by_bob
    head_event = _listed(staff, REVISIONS, {"q": world.plan_head})
    assert "Launch plan v2" in head_event and "Launch plan<" not in head_event


def test_bad_filter_values_are_explained_not_errors(world: World, staff: Client) -> None:
    page = _listed(staff, HEADS, {"channel": "not-a-uuid", "author": "xyz"})
    assert "channel: not a uuid" in page.lower()
    assert "author: not a 64-character hex pubkey" in page.lower()
    assert "Launch plan v2" not in page


def test_the_list_reads_one_index_in_order(world: World, staff: Client) -> None:
    """The page's query walks artifact_heads_modified backwards: no sort of the table."""
    request = RequestFactory().get(HEADS)
    request.user = User.objects.get(username="operator")
    model_admin = ArtifactHeadAdmin(ArtifactHead, admin.site)
    changelist = model_admin.get_changelist_instance(request)
    sql, params = changelist.queryset[:51].query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            cursor.execute(f"EXPLAIN {sql}", params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("RESET enable_seqscan")
    assert "artifact_heads_modified" in plan and "Backward" in plan, plan
    assert "Sort" not in plan.split("SubPlan")[0], plan


def test_read_only_except_moderation(world: World, staff: Client) -> None:
    head = ArtifactHead.objects.get(artifact_id=world.plan)
    assert staff.get(f"{HEADS}add/").status_code == 403
    detail = staff.get(f"{HEADS}{head.pk}/change/")
    assert detail.status_code == 200
    shown = detail.content.decode()
    assert "Launch plan v2" in shown  # the stored event
    history = f"{REVISIONS}?community__id__exact={world.community.pk}&amp;artifact={world.plan}"
    assert history in shown
    posted = staff.post(f"{HEADS}{head.pk}/change/", {"channel_id": world.design})
    assert posted.status_code == 403
    assert staff.post(f"{HEADS}{head.pk}/delete/").status_code == 403


def test_staff_without_change_permission_browse_but_cannot_redact(
    world: World, staff: Client
) -> None:
    viewer = User.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_artifacthead"))
    client = Client()
    client.force_login(viewer)
    page = client.get(HEADS).content.decode()
    assert "Logo sketch" in page and "redact_heads" not in page
    head = ArtifactHead.objects.get(artifact_id=world.plan)
    client.post(HEADS, {"action": "redact_heads", "_selected_action": [head.pk], "index": 0})
    assert Event.objects.get(event_id=head.event_id).deleted_at is None


def _full_round(who: Key) -> str:
    progress = None
    while True:
        page = _round(who, progress)
        progress = page["progress"]
        if not page["more"]:
            return str(progress)


def _round(who: Key, progress: str | None) -> dict[str, Any]:
    forget_cached_readiness()
    response = signed_post(Client(), "/query", who,
                           [{"artifact": "current", "progress": progress}], host=HOST)
    assert response.status_code == 200, response.content
    return dict(orjson.loads(response.content))


def test_admin_redaction_reaches_the_next_continuation_round_as_a_removal(
    world: World, staff: Client
) -> None:
    progress = _full_round(world.bob)
    head = ArtifactHead.objects.get(artifact_id=world.plan)
    before = head.modified_at
    response = staff.post(HEADS, {"action": "redact_heads", "_selected_action": [head.pk],
                                  "index": 0})
    assert response.status_code == 302
    head.refresh_from_db()
    assert head.modified_at > before  # stamped by the writer, like a kind 9005 would
    assert Event.objects.get(event_id=world.plan_head).deleted_at is not None
    entry = LogEntry.objects.get(object_id=str(head.pk))
    assert entry.user.username == "operator" and entry.action_flag == CHANGE
    assert world.plan_head in entry.get_change_message()

    page = _round(world.bob, progress)
    assert page["reset"] is False
    assert {"d": world.plan, "reason": "redacted"} in page["removed"]
    assert not any(event["id"] == world.plan_head for event in page["events"])

    # Redacting again stamps nothing more and logs nothing more.
    stamped = ArtifactHead.objects.get(pk=head.pk).modified_at
    staff.post(HEADS, {"action": "redact_heads", "_selected_action": [head.pk], "index": 0})
    assert ArtifactHead.objects.get(pk=head.pk).modified_at == stamped
    assert LogEntry.objects.filter(object_id=str(head.pk)).count() == 1


def test_redacting_an_old_revision_stamps_it_and_leaves_the_head_readable(
    world: World, staff: Client
) -> None:
    first = ArtifactRevision.objects.get(artifact_id=world.plan, op="create")
    head_stamp = ArtifactHead.objects.get(artifact_id=world.plan).modified_at
    staff.post(REVISIONS, {"action": "redact_revisions", "_selected_action": [first.pk],
                           "index": 0})
    first_after = ArtifactRevision.objects.get(pk=first.pk)
    assert first_after.modified_at > first.modified_at
    assert ArtifactHead.objects.get(artifact_id=world.plan).modified_at == head_stamp
    assert LogEntry.objects.get(object_id=str(first.pk)).user.username == "operator"
    page = _listed(staff, REVISIONS, {"artifact": world.plan})
    assert page.count('alt="True"') == 1  # the one redacted revision


def test_unknown_ids_and_odd_page_numbers_are_answered(world: World, staff: Client) -> None:
    page = _listed(staff, HEADS, {"q": str(uuid.uuid4())})
    assert "Launch plan" not in page and "no rows" in page
    assert "rows 1-3" in _listed(staff, HEADS, {"p": "-3"})
    past_the_end = staff.get(HEADS, {"p": "7"})
    assert past_the_end.status_code == 302 and "e=1" in past_the_end["Location"]
