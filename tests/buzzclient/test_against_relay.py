"""The client against a real relay process (`buzz-admin serve` on the pytest database).

Writes go through the relay's own services (tests/factories.py) in this process and are
committed, so the server sees them; the client syncs over HTTP like any other. What a reader
should hold is written down independently in each test (which channels it can read, which
artifacts live there) and compared with the client's collection.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from django.db import connection

from artifacts.models import Event
from buzzclient import RelayAddress, RelayHttp, Syncer
from buzzclient.cli import main as cli_main
from nostr.events import sign
from relayinfo.readiness import forget_cached_readiness
from tests.buzzclient.world import World, catch_up, totals
from tests.factories import Key, add_member, redact, write
from tests.relay_server import RelayProcess, start_relay

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def sync(relay_server: RelayProcess, tmp_path: Path) -> Iterator[Callable[..., Syncer]]:
    opened: list[Syncer] = []

    def make(key: Key, *, db: str = "local.sqlite", url: str | None = None,
             **kwargs: object) -> Syncer:
        syncer = Syncer(relay_url=url or relay_server.url, secret_hex=key.secret,
                        db=tmp_path / db, **kwargs)  # type: ignore[arg-type]
        opened.append(syncer)
        return syncer

    yield make
    for syncer in opened:
        syncer.close()


def fresh_full_read(
    sync: Callable[..., Syncer], key: Key, name: str, expected: dict[str, str]
) -> dict[str, str]:
    fresh = sync(key, db=f"fresh-{name}.sqlite")
    assert catch_up(fresh, expected)[0].kind == "full"
    return fresh.heads()


def test_first_full_round_holds_exactly_what_the_reader_may_read(
    world: World, sync: Callable[..., Syncer]
) -> None:
    world.create(world.open_h, 9)
    world.create(world.member_h, 6)
    world.create(world.secret_h, 4)
    syncer = sync(world.bob, page_limit=4)
    info = syncer.relay_info()
    assert info.incremental and info.query_endpoint == "/query"
    rounds = catch_up(syncer, world.readable({world.open_h, world.member_h}))
    assert rounds[0].kind == "full" and rounds[0].pages >= 2
    assert totals(rounds) == (15, 0, 0, 0)
    # Each event is stored exactly as the relay stores it.
    for d, event in syncer.artifacts().items():
        stored = Event.objects.get(community=world.community, event_id=event.id)
        assert orjson.loads(stored.raw) == event.to_dict()
        assert ("d", d) in event.tags


def test_continuation_rounds_deliver_only_the_changes(
    world: World, sync: Callable[..., Syncer]
) -> None:
    ds = world.create(world.open_h, 8) + world.create(world.member_h, 3)
    syncer = sync(world.bob, page_limit=3)
    catch_up(syncer, world.readable({world.open_h, world.member_h}))
    world.update(ds[0])
    world.update(ds[9])
    world.create(world.member_h)
    world.create(world.secret_h)  # not the reader's business
    rounds = catch_up(syncer, world.readable({world.open_h, world.member_h}))
    assert {r.kind for r in rounds} == {"continuation"}
    assert totals(rounds) == (1, 2, 0, 0)
    # The overlap (120 s) re-delivers recent changes as duplicates: applied idempotently.
    quiet = syncer.run_round()
    assert quiet.kind == "continuation"
    assert (quiet.added, quiet.updated, quiet.removed, quiet.resets) == (0, 0, 0, 0)


def test_a_run_that_finishes_an_interrupted_round_also_brings_what_was_written_since(
    world: World, relay_server: RelayProcess, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An interrupted round's range ends where its first page put it (T). The run that
    finishes it runs one more round, so a write made in between is in the collection."""
    world.create(world.open_h, 6)
    db = tmp_path / "local.sqlite"
    with Syncer(relay_url=relay_server.url, secret_hex=world.bob.secret, db=db,
                page_limit=2) as first:
        opened = first.start_round()
        opened.step()  # the first of three pages: the round stays open
        assert not opened.done
    later = world.create(world.member_h)[0]
    key_file = tmp_path / "bob.key"
    key_file.write_text(world.bob.secret + "\n")
    assert cli_main(["--relay", relay_server.url, "--key-file", str(key_file),
                     "--db", str(db), "--limit", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["full round", "continuation round"]
    with Syncer(relay_url=relay_server.url, secret_hex=world.bob.secret, db=db) as resumed:
        assert later in resumed.heads()
        assert resumed.heads() == world.readable({world.open_h, world.member_h})


def test_removals_reach_the_collection(world: World, sync: Callable[..., Syncer]) -> None:
    ds = world.create(world.open_h, 6)
    syncer = sync(world.bob, page_limit=2)
    catch_up(syncer, world.readable({world.open_h, world.member_h}))
    world.delete(ds[0])
    world.move(ds[1], world.secret_h)  # away, out of the reader's sight
    world.move(ds[2], world.member_h)  # still readable: an update, not a removal
    _h, head = world.heads.pop(ds[3])
    redact(world.community, world.alice, world.open_h, head)
    rounds = catch_up(syncer, world.readable({world.open_h, world.member_h}))
    assert {r.kind for r in rounds} == {"continuation"}
    assert totals(rounds) == (0, 1, 3, 0)
    assert syncer.artifacts()[ds[2]].tags[2] == ("h", world.member_h)
    expected = world.readable({world.open_h, world.member_h})
    assert fresh_full_read(sync, world.bob, "removals", expected) == syncer.heads()


def test_view_changes_cost_their_channels_not_a_reset(
    world: World, sync: Callable[..., Syncer]
) -> None:
    """buzz-sync opts in to incremental view changes (NIP-11 advertises them): a channel made
    private comes as `removed_channels` (applied by each item's stored home), a grant as a
    catch-up of that channel; neither resets the collection."""
    world.create(world.open_h, 5)
    world.create(world.member_h, 2)
    syncer = sync(world.bob, page_limit=3)
    assert syncer.relay_info().incremental_view_changes
    catch_up(syncer, world.readable({world.open_h, world.member_h}))
    write(world.community, world.alice, 9002, [["h", world.open_h], ["private"]])
    closed = catch_up(syncer, world.readable({world.member_h}))
    assert {r.kind for r in closed} == {"continuation"}
    assert totals(closed) == (0, 0, 5, 0)

    add_member(world.community, world.open_h, world.bob)
    granted = catch_up(syncer, world.readable({world.open_h, world.member_h}))
    assert {r.kind for r in granted} == {"continuation"}
    assert totals(granted) == (5, 0, 0, 0)
    # Only the granted channel's heads came (plus what the overlap repeats of recent changes).
    assert sum(r.items for r in granted) <= 2 * 5 + 3
    expected = world.readable({world.open_h, world.member_h})
    assert fresh_full_read(sync, world.bob, "visibility", expected) == syncer.heads()


def _wait_for_capability(syncer: Syncer, present: bool) -> None:
    deadline = time.monotonic() + 30
    while syncer.relay_info().incremental != present:
        assert time.monotonic() < deadline, f"capability never became {present}"
        time.sleep(0.3)


def test_without_the_capability_rounds_are_full_until_it_returns(
    world: World, sync: Callable[..., Syncer]
) -> None:
    ds = world.create(world.open_h, 5)
    syncer = sync(world.bob, page_limit=2)
    catch_up(syncer, world.readable({world.open_h, world.member_h}))
    index = "artifact_heads_channel"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = %s", [index]
        )
        definition = cursor.fetchone()[0]
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP INDEX {index}")  # readiness item 3 fails
        forget_cached_readiness()
        _wait_for_capability(syncer, present=False)
        world.update(ds[0])
        first = catch_up(syncer, world.readable({world.open_h, world.member_h}))
        world.update(ds[1])
        second = catch_up(syncer, world.readable({world.open_h, world.member_h}))
        for summary in first + second:
            # Every round started from null and read the whole collection (3 pages of 2).
            assert (summary.kind, summary.incremental, summary.pages) == ("full", False, 3)
        assert totals(first)[1] == totals(second)[1] == 1
    finally:
        with connection.cursor() as cursor:
            cursor.execute(definition.replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS"))
    _wait_for_capability(syncer, present=True)
    assert syncer.run_round().kind == "full"  # no token of the not-ready period is continued
    world.update(ds[2])
    back = catch_up(syncer, world.readable({world.open_h, world.member_h}))
    assert {r.kind for r in back} == {"continuation"}
    assert totals(back) == (0, 1, 0, 0)


def test_429_retry_after_is_honoured(world: World, tmp_path: Path) -> None:
    world.create(world.open_h, 6)
    limited = start_relay({"RELAY_RATE_LIMIT_PUBKEY_RATE": "1",
                           "RELAY_RATE_LIMIT_PUBKEY_BURST": "2"})
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    try:
        with Syncer(relay_url=limited.url, secret_hex=world.bob.secret,
                    db=tmp_path / "limited.sqlite", page_limit=1, sleep=sleep) as syncer:
            started = time.monotonic()
            summary = syncer.run_round()
            elapsed = time.monotonic() - started
            stats = syncer.http.stats
            assert summary.added == 6 and summary.pages == 7
            assert stats.rate_limited >= 3
            # Every 429 carried Retry-After, and the client waited exactly that long.
            assert stats.retry_after and waits == stats.retry_after
            assert all(wait >= 1 for wait in waits)
            assert elapsed >= sum(waits)
            assert summary.waited == pytest.approx(sum(waits))
    finally:
        limited.stop()


def test_publish_posts_signed_events_and_returns_the_ok_answer(
    world: World, relay_server: RelayProcess, sync: Callable[..., Syncer]
) -> None:
    d = str(uuid.uuid4())
    tags = [["ar", "1"], ["d", d], ["h", world.open_h], ["type", "buzz.note"], ["op", "create"],
            ["title", "from the client"]]
    address = RelayAddress.parse(relay_server.url)
    with RelayHttp(address, world.alice.secret) as alice:
        event = sign(world.alice.secret, kind=45010, tags=tags, content="{}")
        assert alice.publish(event) == (True, "")
        accepted, message = alice.publish(event)
        assert accepted and message.startswith("duplicate:")
    with RelayHttp(address, world.bob.secret) as bob:
        tags[1] = ["d", str(uuid.uuid4())]
        tags[2] = ["h", world.secret_h]
        accepted, message = bob.publish(
            sign(world.bob.secret, kind=45010, tags=tags, content="{}")
        )
        assert not accepted and message.startswith("restricted:")
    syncer = sync(world.bob)
    catch_up(syncer, {d: event.id})
    assert syncer.artifacts()[d] == event


def test_a_round_run_as_soon_as_publish_returns_holds_the_write(
    world: World, relay_server: RelayProcess, sync: Callable[..., Syncer]
) -> None:
    """Read-your-writes through the client (PROTOCOL.md section 5): each round run right after
    `publish` answered `OK` holds that write, without any wait in between."""
    syncer = sync(world.bob, page_limit=10)
    syncer.run_round()
    address = RelayAddress.parse(relay_server.url)
    with RelayHttp(address, world.alice.secret) as alice:
        for attempt in range(25):
            d = str(uuid.uuid4())
            tags = [["ar", "1"], ["d", d], ["h", world.member_h], ["type", "buzz.note"],
                    ["op", "create"], ["title", f"write {attempt}"]]
            event = sign(world.alice.secret, kind=45010, tags=tags, content="{}")
            assert alice.publish(event) == (True, "")
            summary = syncer.run_round()
            assert summary.kind == "continuation" and summary.added == 1, (attempt, summary)
            assert syncer.heads()[d] == event.id
