"""Rounds and page application against the fake relay (tests/buzzclient/fake_relay.py).

These pin the client's own logic (staging, tokens beside data, resets, capability changes,
retries); the same behaviours are exercised end to end against the real relay in
test_against_relay.py.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from buzzclient import ProtocolViolation, RetryPolicy, Syncer
from buzzclient.errors import ConcurrentSync, RelayBusy, Unauthorized
from buzzclient.page import parse_page
from buzzclient.store import CollectionKey, CollectionStore
from nostr.schnorr import generate_secret
from tests.buzzclient.fake_relay import FakeRelay, artifact_event, marker_event, serve

CHANNEL = str(uuid.uuid4())
OTHER = str(uuid.uuid4())


@pytest.fixture
def relay() -> Iterator[FakeRelay]:
    with serve() as fake:
        yield fake


def syncer_for(
    relay: FakeRelay, db: Path, *, secret: str | None = None, **kwargs: object
) -> Syncer:
    """A syncer that records its sleeps. Without prefetching unless asked: these tests count
    and order the relay's requests, and a test that abandons a round mid-way would leave a
    request in flight."""
    kwargs.setdefault("prefetch", False)
    sleeps: list[float] = []
    syncer = Syncer(relay_url=relay.url, secret_hex=secret or READER, db=db,
                    sleep=sleeps.append, **kwargs)  # type: ignore[arg-type]
    syncer.sleeps = sleeps  # type: ignore[attr-defined]
    return syncer


READER = generate_secret()


def test_first_round_is_full_then_continuations_apply_changes(
    relay: FakeRelay, tmp_path: Path
) -> None:
    ds = [relay.create(CHANNEL, f"task {i}") for i in range(25)]
    with syncer_for(relay, tmp_path / "c.sqlite", page_limit=10) as syncer:
        first = syncer.run_round()
        assert (first.kind, first.pages, first.added, first.resets) == ("full", 3, 25, 0)
        assert syncer.heads() == relay.readable()
        assert relay.sent_progress[0] is None

        relay.update(ds[0], "renamed")
        relay.update(ds[1], "renamed")
        relay.remove(ds[2])
        relay.remove(ds[3], reason="access")
        new = relay.create(OTHER, "new one")
        second = syncer.run_round()
        assert second.kind == "continuation"
        assert (second.added, second.updated, second.removed) == (1, 2, 2)
        assert relay.sent_progress[3] is not None  # continued the finished round's token
        assert syncer.heads() == relay.readable()
        assert syncer.artifacts()[new].tags[2] == ("h", OTHER)

        quiet = syncer.run_round()
        assert (quiet.pages, quiet.items, quiet.added, quiet.removed) == (1, 0, 0, 0)


def test_interrupted_full_round_resumes_from_the_stored_token_and_stays_invisible(
    relay: FakeRelay, tmp_path: Path
) -> None:
    for i in range(30):
        relay.create(CHANNEL, f"task {i}")
    db = tmp_path / "c.sqlite"
    with syncer_for(relay, db, page_limit=10) as syncer:
        current = syncer.start_round()
        current.step()
        current.step()  # two of three pages applied, then the process "dies"
        assert syncer.heads() == {}  # a staged round is not visible before it finishes
        stored = syncer.store.state(syncer.collection_id).progress
    with syncer_for(relay, db, page_limit=10) as again:
        summary = again.run_round()
        assert relay.sent_progress[-1] == stored  # resumed, not restarted
        assert (summary.kind, summary.pages, summary.added) == ("full", 1, 30)
        assert again.heads() == relay.readable()


def test_reset_during_continuation_keeps_the_old_collection_until_the_new_round_ends(
    relay: FakeRelay, tmp_path: Path
) -> None:
    ds = [relay.create(CHANNEL, f"task {i}") for i in range(12)]
    with syncer_for(relay, tmp_path / "c.sqlite", page_limit=5) as syncer:
        syncer.run_round()
        before = syncer.heads()
        relay.view += 1  # the reader's view changed: its next page resets
        relay.remove(ds[0], reason="access")
        current = syncer.start_round()
        current.step()
        assert current.summary.resets == 1 and current.summary.kind == "full"
        assert syncer.heads() == before  # still the previous complete collection
        while not current.done:
            current.step()
        assert syncer.heads() == relay.readable()
        assert (current.summary.removed, current.summary.added) == (1, 0)


def test_without_the_capability_every_round_is_full_and_tokens_are_never_continued(
    relay: FakeRelay, tmp_path: Path
) -> None:
    relay.incremental = False
    ds = [relay.create(CHANNEL, f"task {i}") for i in range(7)]
    with syncer_for(relay, tmp_path / "c.sqlite", page_limit=3) as syncer:
        assert syncer.run_round().kind == "full"
        relay.remove(ds[0])
        relay.update(ds[1], "changed")
        second = syncer.run_round()
        assert (second.kind, second.removed, second.updated, second.added) == ("full", 1, 1, 0)
        assert syncer.heads() == relay.readable()
        # Each round started from null: never a finished round's token.
        starts = [i for i, p in enumerate(relay.sent_progress) if p is None]
        assert len(starts) == 2 and starts[1] == 3

        # An interrupted round is restarted, not resumed, while the capability is absent.
        syncer.start_round().step()
        mark = len(relay.sent_progress)
        syncer.run_round()
        assert relay.sent_progress[mark] is None

        # Nor once it appears: that round's token was not obtained under the capability.
        syncer.start_round().step()
        relay.incremental = True  # the deployment became ready
        mark = len(relay.sent_progress)
        third = syncer.run_round()
        assert third.kind == "full" and relay.sent_progress[mark] is None
        relay.update(ds[2], "again")
        fourth = syncer.run_round()
        assert (fourth.kind, fourth.updated, fourth.pages) == ("continuation", 1, 1)
        assert syncer.heads() == relay.readable()


def test_rate_limit_is_honoured_for_as_long_as_retry_after_says(
    relay: FakeRelay, tmp_path: Path
) -> None:
    relay.create(CHANNEL, "one")
    relay.script = [(429, {"Retry-After": "3"}, {"error": "rate_limited"}),
                    (429, {"Retry-After": "1"}, {"error": "rate_limited"})]
    with syncer_for(relay, tmp_path / "c.sqlite") as syncer:
        summary = syncer.run_round()
        assert syncer.sleeps == [3.0, 1.0]  # type: ignore[attr-defined]
        assert summary.waited == 4.0 and summary.added == 1
        assert syncer.http.stats.retry_after == [3.0, 1.0]


def test_503_backs_off_exponentially_with_jitter_up_to_the_cap(
    relay: FakeRelay, tmp_path: Path
) -> None:
    relay.create(CHANNEL, "one")
    relay.script = [(503, {}, {"error": "budget_exceeded"})] * 6
    retry = RetryPolicy(base=1.0, cap=8.0, max_attempts=10)
    with syncer_for(relay, tmp_path / "c.sqlite", retry=retry) as syncer:
        assert syncer.run_round().added == 1
        waits = syncer.sleeps  # type: ignore[attr-defined]
        ceilings = [1, 2, 4, 8, 8, 8]
        assert len(waits) == 6
        for wait, ceiling in zip(waits, ceilings, strict=True):
            assert ceiling / 2 <= wait <= ceiling


def test_503_gives_up_after_the_policy_s_attempts(relay: FakeRelay, tmp_path: Path) -> None:
    relay.script = [(503, {}, {"error": "budget_exceeded"})] * 5
    retry = RetryPolicy(base=0.1, max_attempts=3)
    with syncer_for(relay, tmp_path / "c.sqlite", retry=retry) as syncer:
        with pytest.raises(RelayBusy, match="busy or unavailable"):
            syncer.run_round()
        assert syncer.store.state(syncer.collection_id).version == 0


def test_a_refused_token_starts_a_full_round(relay: FakeRelay, tmp_path: Path) -> None:
    relay.create(CHANNEL, "one")
    with syncer_for(relay, tmp_path / "c.sqlite") as syncer:
        syncer.run_round()
        relay.script = [(400, {}, {"error": "invalid_progress"})]
        summary = syncer.run_round()
        assert (summary.kind, summary.resets) == ("full", 1)
        assert relay.sent_progress[-1] is None
        assert syncer.heads() == relay.readable()


def test_a_marker_applies_only_while_the_local_head_is_its_prev(
    relay: FakeRelay, tmp_path: Path
) -> None:
    moved, kept = str(uuid.uuid4()), str(uuid.uuid4())
    old_moved = artifact_event(moved, CHANNEL, title="moves away")
    old_kept = artifact_event(kept, CHANNEL, title="moves back")
    relay.put(moved, old_moved)
    relay.put(kept, old_kept)
    with syncer_for(relay, tmp_path / "c.sqlite") as syncer:
        syncer.run_round()
        newer = artifact_event(kept, CHANNEL, title="newer", op="update", prev=old_kept["id"])
        relay.put(kept, newer)
        syncer.run_round()
        # Markers for both: one names our head, one names a head we already replaced.
        relay.put(moved, marker_event(moved, CHANNEL, old_moved["id"]))
        relay.put(kept, marker_event(kept, CHANNEL, old_kept["id"]))
        summary = syncer.run_round()
        assert summary.removed == 1
        assert syncer.heads() == {kept: newer["id"]}


def test_a_forged_event_fails_the_page_and_nothing_is_applied(
    relay: FakeRelay, tmp_path: Path
) -> None:
    relay.create(CHANNEL, "genuine")
    with syncer_for(relay, tmp_path / "c.sqlite") as syncer:
        syncer.run_round()
        before = syncer.store.state(syncer.collection_id)
        d = relay.create(CHANNEL, "to be forged")
        event = relay.heads[d].event
        assert event is not None
        event["content"] = "tampered by the relay"
        with pytest.raises(ProtocolViolation, match="id does not match"):
            syncer.run_round()
        assert syncer.store.state(syncer.collection_id) == before
        assert d not in syncer.heads()


def test_a_page_that_fails_half_way_leaves_data_and_token_as_they_were(
    relay: FakeRelay, tmp_path: Path
) -> None:
    ds = [relay.create(CHANNEL, f"task {i}") for i in range(4)]
    db = tmp_path / "c.sqlite"
    with syncer_for(relay, db) as syncer:
        syncer.run_round()
        before_state, before_heads = syncer.store.state(syncer.collection_id), syncer.heads()
        for d in ds:
            relay.update(d, "changed")
        # The disk "fails" on the third row of the page: SQLite aborts the statement.
        syncer.store.db.execute(
            f"CREATE TEMP TRIGGER fail AFTER UPDATE ON artifacts WHEN NEW.d = '{ds[2]}'"
            " BEGIN SELECT RAISE(ABORT, 'disk full'); END"
        )
        with pytest.raises(sqlite3.IntegrityError, match="disk full"):
            syncer.run_round()
        assert syncer.store.state(syncer.collection_id) == before_state
        assert syncer.heads() == before_heads
        syncer.store.db.execute("DROP TRIGGER fail")
        assert syncer.run_round().updated == 4


def test_two_processes_cannot_interleave_pages_of_one_collection(
    relay: FakeRelay, tmp_path: Path
) -> None:
    for i in range(6):
        relay.create(CHANNEL, f"task {i}")
    db = tmp_path / "c.sqlite"
    with syncer_for(relay, db, page_limit=2) as first, \
            syncer_for(relay, db, page_limit=2) as second:
        mine = first.start_round()
        mine.step()
        theirs = second.start_round()  # resumes from first's token
        theirs.step()
        with pytest.raises(ConcurrentSync):
            mine.step()
        while not theirs.done:
            theirs.step()
        assert first.heads() == relay.readable()


def test_collections_are_kept_apart_by_reader_and_filter(relay: FakeRelay, tmp_path: Path) -> None:
    relay.create(CHANNEL, "one")
    db = tmp_path / "c.sqlite"
    with syncer_for(relay, db) as a, syncer_for(relay, db, channels=[CHANNEL]) as b, \
            syncer_for(relay, db, secret=generate_secret()) as c:
        assert len({a.collection_id, b.collection_id, c.collection_id}) == 3
        a.run_round()
        assert b.heads() == {} and c.heads() == {}
        assert b.key.filter == f'{{"#h":["{CHANNEL}"]}}'
    with syncer_for(relay, db, types=["b.x", "a.y", "b.x"]) as d, \
            syncer_for(relay, db, types=["a.y", "b.x"]) as e:
        assert d.collection_id == e.collection_id  # same canonical filter


def test_a_401_is_reported_with_the_relay_s_reason(relay: FakeRelay, tmp_path: Path) -> None:
    relay.script = [(401, {"WWW-Authenticate": "Nostr"},
                     {"error": "unauthorized", "message": "auth event created_at too old"})]
    with syncer_for(relay, tmp_path / "c.sqlite") as syncer, \
            pytest.raises(Unauthorized, match="created_at too old"):
        syncer.run_round()


def test_requests_are_signed_for_the_exact_url_and_body(relay: FakeRelay, tmp_path: Path) -> None:
    relay.create(CHANNEL, "one")
    with syncer_for(relay, tmp_path / "c.sqlite", page_limit=1) as syncer:
        relay.create(CHANNEL, "two")
        syncer.run_round()
        syncer.run_round()
    assert relay.auth_failures == []
    assert relay.pages_served >= 3


def test_prefetching_overlaps_requests_without_changing_what_is_applied(
    relay: FakeRelay, tmp_path: Path
) -> None:
    ds = [relay.create(CHANNEL, f"task {i}") for i in range(23)]
    with syncer_for(relay, tmp_path / "c.sqlite", page_limit=5, prefetch=True) as syncer:
        summary = syncer.run_round()
        assert (summary.pages, summary.added) == (5, 23)
        assert len(relay.sent_progress) == 5  # nothing fetched that was not needed
        assert syncer.heads() == relay.readable()

        # A page that fails to apply drops the page fetched behind it; the next round
        # resumes from the last applied page's token.
        for d in ds[:12]:
            relay.update(d, "changed")
        syncer.store.db.execute(
            f"CREATE TEMP TRIGGER fail AFTER UPDATE ON artifacts WHEN NEW.d = '{ds[7]}'"
            " BEGIN SELECT RAISE(ABORT, 'disk full'); END"
        )
        with pytest.raises(sqlite3.IntegrityError):
            syncer.run_round()
        syncer.background().submit(lambda: None).result()  # the dropped fetch has ended
        syncer.store.db.execute("DROP TRIGGER fail")
        stored = syncer.store.state(syncer.collection_id).progress
        mark = len(relay.sent_progress)
        resumed = syncer.run_round()
        assert relay.sent_progress[mark] == stored
        assert resumed.updated == 12 - 5
        assert syncer.heads() == relay.readable()


def _page_body(events: list[dict[str, object]], **fields: object) -> bytes:
    return orjson.dumps({"events": events, "removed": [], "progress": "t", "more": False,
                         "reset": False, **fields})


def test_removed_channels_delete_by_each_items_stored_home(tmp_path: Path) -> None:
    """PROTOCOL.md section 5: before a page's events, every item whose *stored* head's `h` is
    in `removed_channels` goes, even one that has moved since; the page's own events (from
    where the items are now) apply after."""
    stays, leaves, moved = (str(uuid.uuid4()) for _ in range(3))
    with CollectionStore(tmp_path / "c.sqlite") as store:
        collection = store.open_collection(CollectionKey("http://x", "x", "ab" * 32, "{}")).id
        first = parse_page(_page_body([artifact_event(stays, OTHER, title="a"),
                                       artifact_event(leaves, CHANNEL, title="b"),
                                       artifact_event(moved, CHANNEL, title="c")]))
        state = store.apply_page(collection, expected_version=0, sent_progress=None,
                                 page=first, continuable=True).state
        moved_event = artifact_event(moved, OTHER, title="c", op="move")
        page = parse_page(_page_body([moved_event], removed_channels=[CHANNEL]))
        assert page.removed_channels == (CHANNEL,)
        applied = store.apply_page(collection, expected_version=state.version,
                                   sent_progress="t", page=page, continuable=True)
        assert applied.changes.removed == 2 and applied.changes.added == 1
        assert store.heads(collection) == {stays: first.events[0].event_id,
                                           moved: moved_event["id"]}


@pytest.mark.parametrize("removed_channels", [["not-a-uuid"], "x", [1], None])
def test_a_malformed_removed_channels_list_fails_the_page(removed_channels: object) -> None:
    with pytest.raises(ProtocolViolation, match="removed_channels"):
        parse_page(_page_body([], removed_channels=removed_channels))


def test_a_page_that_resets_and_removes_channels_fails() -> None:
    with pytest.raises(ProtocolViolation, match="resets and removes"):
        parse_page(_page_body([], reset=True, removed_channels=[CHANNEL]))
