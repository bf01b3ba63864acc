"""Incremental view changes (PROTOCOL.md section 5): a reader that opts in (`view_changes:
"incremental"`) gets `removed_channels` for channels it lost and a catch-up of the channels it
gained, instead of a reset; one that does not opt in resets as before. Enablement and type
changes, and a view whose channels a token cannot carry, still reset.

Every test ends with the collection equal to a fresh full read.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models import F
from django.utils import timezone

from artifacts.models import ChannelSet, Community, ListingChange
from artifacts.selectors.filters import parse_filter
from artifacts.selectors.rounds import Page, prepare_round
from artifacts.services.communities import community_update_policy
from artifacts.services.transactions import LISTING_COLLECT_BATCH
from artifacts.tokens import (
    MAX_CATCHUP_CHANNELS,
    MAX_PRIVATE_CHANNELS,
    ProgressToken,
    decode_progress,
    encode_progress,
)
from tests.artifacts.selectors.replica import Replica
from tests.factories import (
    add_member,
    create_artifact,
    make_channel,
    make_community,
    make_key,
    move_artifact,
    update_artifact,
    write,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world() -> dict[str, Any]:
    owner, reader = make_key(), make_key()
    community = make_community()
    open_h = make_channel(community, owner=owner)
    joined = make_channel(community, owner=owner, visibility="private", members=[reader])
    hidden = make_channel(community, owner=owner, visibility="private")
    heads = {
        h: dict(create_artifact(community, owner, h) for _ in range(count))
        for h, count in ((open_h, 6), (joined, 4), (hidden, 5))
    }
    return locals()


def synced(world: dict[str, Any], **kwargs: Any) -> Replica:
    replica = Replica(world["community"], world["reader"].pubkey,
                      view_changes="incremental", **kwargs)
    replica.round(limit=3)
    return replica


def next_round(replica: Replica, limit: int = 100) -> list[Page]:
    pages = replica.round(limit=limit)
    assert replica.heads() == replica.fresh(), "the round left a wrong collection"
    return pages


def entries(pages: list[Page]) -> int:
    return sum(len(page.events) + len(page.removed) for page in pages)


def test_a_grant_costs_the_granted_channel_not_a_reset(world: dict[str, Any]) -> None:
    replica = synced(world)
    add_member(world["community"], world["hidden"], world["reader"])
    pages = next_round(replica, limit=2)
    assert not any(page.reset for page in pages)
    assert not any(page.removed_channels for page in pages)
    assert set(world["heads"][world["hidden"]]) <= set(replica.items)
    # The catch-up brings the channel's 5 heads; nothing else of the collection comes again.
    assert entries(pages) <= 2 * 5 + 2
    quiet = next_round(replica)
    assert entries(quiet) == 0 and not quiet[0].reset


def test_without_opting_in_a_grant_resets(world: dict[str, Any]) -> None:
    replica = Replica(world["community"], world["reader"].pubkey)
    replica.round()
    add_member(world["community"], world["hidden"], world["reader"])
    pages = next_round(replica)
    assert pages[0].reset and pages[0].reset_reason == "view"
    assert entries(pages) == 15
    # `view_changes: "reset"` says the same as leaving the key out.
    explicit = Replica(world["community"], world["reader"].pubkey, view_changes="reset")
    explicit.round()
    write(world["community"], world["owner"], 9001, [["h", world["hidden"]],
                                                     ["p", world["reader"].pubkey]])
    assert next_round(explicit)[0].reset


def test_a_removal_names_the_channel_and_the_client_drops_its_items(
    world: dict[str, Any],
) -> None:
    community, reader, joined = world["community"], world["reader"], world["joined"]
    replica = synced(world)
    write(community, reader, 9001, [["h", joined], ["p", reader.pubkey]])
    pages = next_round(replica)
    assert not any(page.reset for page in pages)
    assert pages[0].removed_channels == [joined]
    assert not set(world["heads"][joined]) & set(replica.items)
    assert all(page.removed == [] for page in pages)  # no artifact of it is named
    # Rejoined: the catch-up brings them back.
    add_member(community, joined, reader)
    pages = next_round(replica)
    assert not any(page.reset or page.removed_channels for page in pages)
    assert set(world["heads"][joined]) <= set(replica.items)


def test_removed_channels_are_never_channels_the_reader_could_not_read(
    world: dict[str, Any],
) -> None:
    community, owner = world["community"], world["owner"]
    replica = synced(world)
    # Another reader's membership, then the hidden channel deleted: nothing of the reader's.
    add_member(community, world["hidden"], make_key())
    write(community, owner, 9008, [["h", world["hidden"]]])
    pages = next_round(replica)
    assert not any(page.reset or page.removed_channels for page in pages)
    # Made private, the open channel leaves the reader's view (it is no member).
    write(community, owner, 9002, [["h", world["open_h"]], ["private"]])
    pages = next_round(replica)
    assert [channel for page in pages for channel in page.removed_channels] == [world["open_h"]]
    assert not any(page.reset for page in pages)


def test_a_view_change_mid_round_joins_the_catch_up(world: dict[str, Any]) -> None:
    community, owner, reader = world["community"], world["owner"], world["reader"]
    replica = Replica(community, reader.pubkey, view_changes="incremental")
    first = replica.page(limit=2)
    assert first.reset and first.more
    add_member(community, world["hidden"], reader)
    # A move into the gained channel and one out of the channel about to be lost, mid-round.
    d, head = next(iter(world["heads"][world["open_h"]].items()))
    move_artifact(community, owner, d, world["hidden"], prev=head)
    gone, gone_head = next(iter(world["heads"][world["joined"]].items()))
    move_artifact(community, owner, gone, world["open_h"], prev=gone_head)
    write(community, reader, 9001, [["h", world["joined"]], ["p", reader.pubkey]])
    pages = replica.round(limit=2)
    assert not any(page.reset for page in pages)
    assert [c for page in pages for c in page.removed_channels] == [world["joined"]]
    next_round(replica, limit=2)  # the moves were stamped after the first round's T
    assert d in replica.items and gone in replica.items
    assert not set(world["heads"][world["joined"]]) - {gone} & set(replica.items)


def test_a_channel_deleted_during_the_catch_up(world: dict[str, Any]) -> None:
    community, owner, reader = world["community"], world["owner"], world["reader"]
    second = make_channel(community, owner=owner, visibility="private")
    for _ in range(4):
        create_artifact(community, owner, second)
    replica = synced(world)
    add_member(community, world["hidden"], reader)
    add_member(community, second, reader)
    first = replica.page(limit=2)
    assert first.more and not first.reset
    write(community, owner, 9008, [["h", world["hidden"]]])
    pages = [first, *replica.round(limit=2)]
    assert not any(page.reset for page in pages)
    assert world["hidden"] in [c for page in pages for c in page.removed_channels]
    next_round(replica, limit=2)
    assert not set(world["heads"][world["hidden"]]) & set(replica.items)


def test_an_update_during_the_catch_up_arrives_once_the_round_is_done(
    world: dict[str, Any],
) -> None:
    community, owner, hidden = world["community"], world["owner"], world["hidden"]
    replica = synced(world)
    add_member(community, hidden, world["reader"])
    replica.page(limit=1)
    d, head = next(iter(world["heads"][hidden].items()))
    new_head = update_artifact(community, owner, d, hidden, prev=head)
    replica.round(limit=1)
    next_round(replica, limit=1)
    assert replica.heads()[d] == new_head


def test_enablement_and_type_changes_still_reset(world: dict[str, Any]) -> None:
    community = world["community"]
    replica = synced(world)
    community_update_policy(community_id=community.pk, artifact_types=["buzz.note"])
    pages = next_round(replica)
    assert pages[0].reset and pages[0].reset_reason == "view"
    community_update_policy(community_id=community.pk, artifact_types=None)
    assert next_round(replica)[0].reset
    # A type change and a channel change in one: still a reset (the types differ).
    community_update_policy(community_id=community.pk, artifacts_enabled=False)
    add_member(community, world["hidden"], world["reader"])
    assert next_round(replica)[0].reset


def test_a_filtered_reader_only_hears_of_channels_within_its_filter(
    world: dict[str, Any],
) -> None:
    community, owner, reader = world["community"], world["owner"], world["reader"]
    replica = synced(world, channels=[world["joined"], world["hidden"]])
    write(community, owner, 9002, [["h", world["open_h"]], ["private"]])  # outside the filter
    add_member(community, world["hidden"], reader)
    pages = next_round(replica)
    assert not any(page.reset or page.removed_channels for page in pages)
    assert set(replica.items) == set(world["heads"][world["joined"]]) | set(
        world["heads"][world["hidden"]])


def _token(replica: Replica) -> tuple[ProgressToken, bytes]:
    query = parse_filter({**replica.filter, "progress": replica.token})
    request = prepare_round(community_id=replica.community.pk, reader=replica.reader, query=query)
    decoded = decode_progress(replica.token or "", binding=request.binding)
    assert isinstance(decoded, ProgressToken)
    return decoded, request.binding


def test_a_token_refers_to_the_view_and_stays_small(world: dict[str, Any]) -> None:
    replica = synced(world)
    token, _binding = _token(replica)
    assert token.view_private == (uuid.UUID(world["joined"]).bytes,)
    assert len(replica.token or "") < 400


def test_a_token_without_the_private_channels_resets_only_when_they_are_needed(
    world: dict[str, Any],
) -> None:
    community, owner, reader = world["community"], world["owner"], world["reader"]
    replica = synced(world)
    token, binding = _token(replica)
    # As a token of a reader with more private channels than a token carries.
    replica.token = encode_progress(token._replace(view_private=None), binding=binding)
    # A listing change of an open channel does not need them: applied incrementally.
    write(community, owner, 9002, [["h", world["open_h"]], ["private"]])
    pages = next_round(replica)
    assert not any(page.reset for page in pages)
    assert pages[0].removed_channels == [world["open_h"]]
    token, binding = _token(replica)
    assert token.view_private is not None  # recomputed: it fits again
    replica.token = encode_progress(token._replace(view_private=None), binding=binding)
    # A membership change of a private channel does: the page resets.
    add_member(community, world["hidden"], reader)
    assert next_round(replica)[0].reset


def test_a_missing_log_version_resets_on_a_change(world: dict[str, Any]) -> None:
    """A writer that counts a listing change without logging it (an older relay) leaves a
    version without its row: the change cannot be derived, and the page resets."""
    community = world["community"]
    replica = synced(world)
    Community.objects.filter(pk=community.pk).update(listing_version=F("listing_version") + 1)
    pages = next_round(replica)
    assert pages[0].reset and pages[0].reset_reason == "view"


def test_the_log_is_collected_once_older_than_any_live_token(
    world: dict[str, Any], settings: Any,
) -> None:
    community, owner = world["community"], world["owner"]
    logged = ListingChange.objects.filter(community_id=community.pk)
    assert logged.count() == community_listing(community)  # one row per version
    settings.ARTIFACT_SYNC_TOKEN_MAX_AGE = 60
    logged.update(changed_at=F("changed_at") - timedelta(days=2))
    make_channel(community, owner=owner)
    # Each change collects up to LISTING_COLLECT_BATCH old rows, the oldest first.
    left = logged.count()
    assert left == max(1, community_listing(community) - LISTING_COLLECT_BATCH)
    newest = logged.order_by("-listing_version").first()
    assert newest is not None and newest.listing_version == community_listing(community)


def community_listing(community: Community) -> int:
    return Community.objects.get(pk=community.pk).listing_version


@pytest.mark.parametrize("open_channels", [1, 256, 257])
def test_wide_views_change_incrementally(world: dict[str, Any], open_channels: int) -> None:
    """Views above and below any bound: a new channel costs its own heads, never a reset."""
    community, owner, reader = world["community"], world["owner"], world["reader"]
    make_channels(community, open_channels)
    replica = synced(world)
    assert len(replica.token or "") < 1000
    fresh = make_channel(community, owner=owner)
    heads = dict(create_artifact(community, owner, fresh) for _ in range(3))
    pages = next_round(replica)
    assert not any(page.reset or page.removed_channels for page in pages)
    assert entries(pages) <= 2 * 3 + 1 and set(heads) <= set(replica.items)
    write(community, owner, 9008, [["h", fresh]])
    pages = next_round(replica)
    assert [c for page in pages for c in page.removed_channels] == [fresh]
    add_member(community, world["hidden"], reader)
    pages = next_round(replica)
    assert not any(page.reset for page in pages) and entries(pages) <= 2 * 5 + 1


def make_channels(community: Community, count: int) -> None:
    """`count` open channels, written directly (the services would take minutes for thousands),
    before the reader's first round: no listing change after its view is left unlogged."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO channels (community_id, channel_id, name, visibility, created_by,"
            " created_at) SELECT %s, gen_random_uuid(), 'bulk', 'open', '', now()"
            " FROM generate_series(1, %s)", [community.pk, count])


def test_many_private_channels_are_stored_and_changes_stay_incremental(
    world: dict[str, Any],
) -> None:
    """More private channels than a token carries: the set is stored by its digest, shared by
    equal sets, and a grant or removal among them is still an incremental change."""
    community, owner, reader = world["community"], world["owner"], world["reader"]
    many = [make_channel(community, owner=owner, visibility="private", members=[reader])
            for _ in range(MAX_PRIVATE_CHANNELS + 5)]
    replica = synced(world)
    token, _binding = _token(replica)
    assert token.private_ref and token.view_private == ()
    assert len(replica.token or "") < 1000
    assert ChannelSet.objects.filter(community_id=community.pk).count() == 1
    add_member(community, world["hidden"], reader)
    write(community, reader, 9001, [["h", many[0]], ["p", reader.pubkey]])
    pages = next_round(replica)
    assert not any(page.reset for page in pages)
    assert [c for page in pages for c in page.removed_channels] == [many[0]]
    assert set(world["heads"][world["hidden"]]) <= set(replica.items)
    # A second reader with the same channels names the same stored row (else there were 3).
    twin = make_key()
    for h in [*many[1:], world["joined"], world["hidden"]]:
        add_member(community, h, twin)
    Replica(community, twin.pubkey, view_changes="incremental").round()
    assert ChannelSet.objects.filter(community_id=community.pk).count() == 2


def test_a_large_catch_up_is_stored_and_delivered(world: dict[str, Any]) -> None:
    community, owner, reader = world["community"], world["owner"], world["reader"]
    gained = [make_channel(community, owner=owner, visibility="private")
              for _ in range(MAX_CATCHUP_CHANNELS + 3)]
    heads = {d for h in gained for d, _ in [create_artifact(community, owner, h)]}
    replica = Replica(community, reader.pubkey, view_changes="incremental")
    first = replica.page(limit=2)  # a full round under way
    assert first.more
    for h in gained:
        add_member(community, h, reader)
    pages = [first, *next_round(replica, limit=4)]
    assert sum(page.reset for page in pages) == 1  # the round's first page only
    assert heads <= set(replica.items)
    assert ChannelSet.objects.filter(community_id=community.pk).exists()


def test_stored_sets_are_refreshed_and_collected_by_age(
    world: dict[str, Any], settings: Any,
) -> None:
    community, owner, reader = world["community"], world["owner"], world["reader"]
    for _ in range(MAX_PRIVATE_CHANNELS + 1):
        make_channel(community, owner=owner, visibility="private", members=[reader])
    replica = synced(world)
    stored = ChannelSet.objects.filter(community_id=community.pk)
    settings.ARTIFACT_SYNC_TOKEN_MAX_AGE = 3600
    # Older than half a token's life: the next page refreshes the row its token names.
    stored.update(touched_at=F("touched_at") - timedelta(hours=1))
    token, binding = _token(replica)
    replica.token = encode_progress(
        token._replace(stored_at=token.stored_at - timedelta(hours=1)), binding=binding)
    replica.round()
    assert stored.get().touched_at > timezone.now() - timedelta(minutes=5)
    # Untouched for twice a token's life: collected by the next page that stores a set.
    stored.update(touched_at=F("touched_at") - timedelta(hours=3))
    other = make_key()
    for _ in range(MAX_PRIVATE_CHANNELS + 1):
        make_channel(community, owner=owner, visibility="private", members=[other])
    Replica(community, other.pubkey, view_changes="incremental").round()
    assert stored.count() == 1 and stored.get().touched_at > timezone.now() - timedelta(minutes=5)
    # The reader's token names a collected set: a change that needs it resets (one that does
    # not is applied, and the page stores the set again: tested above with a token that does
    # not carry it).
    add_member(community, world["hidden"], reader)
    assert next_round(replica)[0].reset
