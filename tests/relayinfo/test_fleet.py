"""Readiness item 4 and the sync epoch: a mixed fleet withdraws the capability and bumps the
epoch while the offending writer is live, and again once it has left; one relay key only."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.test import override_settings
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from artifacts.models import Community
from artifacts.selectors.sync_epoch import current_sync_state
from relayinfo import fleet, readiness
from relayinfo.models import FleetEpisode, RelayInstance
from tests.relayinfo.conftest import advertised, connect, fresh, transactional, wait_for

pytestmark = transactional

OUR_KEY = settings.RELAY_PUBKEY[:8]
LEGACY_NAME = f"buzzrelay/0.0.9 key={OUR_KEY}"
OTHER_KEY_NAME = "buzzrelay/0.1.0 stamps=1 key=deadbeef"


def epoch() -> int:
    return current_sync_state()[0]


def register(*, stamps: bool = True, key_id: str = OUR_KEY, generated: bool = False,
             seen_seconds_ago: int = 0) -> RelayInstance:
    instance = RelayInstance.objects.create(
        instance_id=uuid.uuid4(), hostname="old-host", pid=4242, version="0.0.9",
        stamps=stamps, key_id=key_id, key_generated=generated,
    )
    if seen_seconds_ago:
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE relay_instances SET last_seen_at = now() - make_interval(secs => %s) "
                "WHERE id = %s",
                [seen_seconds_ago, instance.pk],
            )
    return instance


def gone(conn: psycopg.Connection[Any]) -> None:
    """Close `conn` and wait until its backend has left pg_stat_activity."""
    pid = conn.info.backend_pid
    conn.close()

    def left() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
            return cursor.fetchone()[0] == 0

    assert wait_for(left)


def test_registered_instance_without_stamps_withdraws_and_bumps_once(
    community: Community,
) -> None:
    before = epoch()
    legacy = register(stamps=False)
    report = fresh()
    assert [c.item for c in report.failing] == [4]
    assert "old-host:4242" in report.item(4).found
    assert epoch() == before + 1
    # Still failing: the epoch does not move on every evaluation.
    for _ in range(3):
        assert not fresh().ready
    assert not advertised()
    assert epoch() == before + 1
    episode = FleetEpisode.objects.get()
    assert episode.closed_at is None and episode.opened_epoch == before + 1

    legacy.delete()
    assert fresh().ready
    assert advertised()
    # Bumped again on leaving: tokens issued while it could still write never continue.
    assert epoch() == before + 2
    episode.refresh_from_db()
    assert episode.closed_at is not None and episode.closed_epoch == before + 2
    fresh()
    assert epoch() == before + 2


def test_legacy_application_name_connection_withdraws_and_returns(community: Community) -> None:
    before = epoch()
    legacy = connect(application_name=LEGACY_NAME)
    try:
        report = fresh()
        assert [c.item for c in report.failing] == [4]
        assert "announces no stamps=1" in report.item(4).found
        assert LEGACY_NAME in report.item(4).found
        assert not advertised()
        assert epoch() == before + 1
    finally:
        gone(legacy)
    fresh()  # the fleet refresher notices it left (every 10 s in a serving process)
    assert advertised()
    assert epoch() == before + 2


def test_connection_announcing_no_key_fails(community: Community) -> None:
    conn = connect(application_name="buzzrelay/0.1.0 stamps=1")
    try:
        assert "announces no key=" in fresh().item(4).found
        assert not advertised()
    finally:
        gone(conn)
    fresh()  # the fleet refresher notices it left (every 10 s in a serving process)
    assert advertised()


def test_another_relay_key_withdraws_the_capability(community: Community) -> None:
    before = epoch()
    other = connect(application_name="buzzrelay/0.1.0 stamps=1 key=deadbeef")
    try:
        check = fresh().item(4)
        assert not check.passed
        assert "different relay keys" in check.found and "deadbeef" in check.found
        assert "RELAY_SIGNING_KEY" in check.fix
        assert not advertised()
    finally:
        gone(other)
    fresh()  # the fleet refresher notices it left (every 10 s in a serving process)
    assert advertised()
    assert epoch() == before + 2


def test_registered_instance_with_another_key_withdraws_the_capability(
    community: Community,
) -> None:
    instance = register(key_id="0badc0de")
    assert not advertised()
    instance.delete()
    fresh()  # the refresher records the episode the verdict saw (woken at once when serving)
    assert advertised()


def test_instance_with_generated_key_fails_item_5(community: Community) -> None:
    instance = register(generated=True)
    report = fresh()
    assert [c.item for c in report.failing] == [5]
    assert "generated key" in report.item(5).found
    instance.delete()
    assert advertised()


@override_settings(RELAY_KEY_GENERATED=True)
def test_generated_key_never_advertises_even_with_a_healthy_fleet(community: Community) -> None:
    register()
    assert not fresh().ready
    assert not advertised()


def test_stale_instances_do_not_count_and_expire(community: Community) -> None:
    stale = register(stamps=False, seen_seconds_ago=3 * settings.RELAY_FLEET_REFRESH_SECONDS + 5)
    recent = register(seen_seconds_ago=settings.RELAY_FLEET_REFRESH_SECONDS)
    report = fresh()
    assert report.ready
    assert report.fleet is not None
    assert [row.live for row in report.fleet.instances] == [False, True]
    assert fleet.expire_stale_instances() == 1
    assert list(RelayInstance.objects.values_list("pk", flat=True)) == [recent.pk]
    assert not RelayInstance.objects.filter(pk=stale.pk).exists()


def test_pending_closing_bump_keeps_every_process_not_ready(community: Community) -> None:
    before = epoch()
    legacy = connect(application_name=LEGACY_NAME)
    fresh()
    gone(legacy)
    # Inside a transaction the verdict comes from a separate connection, which never writes:
    # the writer left, but until some process pays the closing bump nobody reports ready.
    with transaction.atomic():
        report = fresh()
        assert not report.ready
        assert "not yet been bumped" in report.item(4).found
    assert epoch() == before + 1
    assert fresh().ready
    assert epoch() == before + 2


def test_concurrent_evaluations_open_one_episode(community: Community) -> None:
    before = epoch()
    legacy = connect(application_name=LEGACY_NAME)
    try:
        failing = readiness.inspect_deployment(connection, local_key_generated=False)
        assert failing.fleet is not None and failing.fleet.problems
        barrier = threading.Barrier(4)
        errors: list[BaseException] = []

        def race() -> None:
            try:
                barrier.wait()
                readiness.reconcile_episode(failing, False)
            except BaseException as exc:  # reported below
                errors.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=race) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        assert epoch() == before + 1
        assert FleetEpisode.objects.count() == 1
    finally:
        gone(legacy)
    assert fresh().ready


@override_settings(RELAY_FLEET_REFRESH_SECONDS=1)
def test_serving_process_registers_refreshes_and_deregisters(community: Community) -> None:
    assert fleet.start_fleet_registration()
    assert not fleet.start_fleet_registration()  # idempotent
    try:
        assert wait_for(lambda: RelayInstance.objects.count() == 1)
        row = RelayInstance.objects.get()
        assert row.instance_id == fleet.instance_id()
        assert row.stamps and row.key_id == OUR_KEY and not row.key_generated
        assert row.version == settings.RELAY_VERSION
        first_seen = row.last_seen_at
        assert wait_for(lambda: RelayInstance.objects.get().last_seen_at > first_seen)
    finally:
        fleet.stop_fleet_registration()
    assert not RelayInstance.objects.exists()


@override_settings(RELAY_FLEET_REFRESH_SECONDS=1)
def test_refresher_bumps_the_epoch_without_any_request(community: Community) -> None:
    before = epoch()
    fleet.start_fleet_registration()
    try:
        legacy = connect(application_name=LEGACY_NAME)
        assert wait_for(lambda: epoch() == before + 1)
        gone(legacy)
        assert wait_for(lambda: epoch() == before + 2)
    finally:
        fleet.stop_fleet_registration()


def test_asgi_lifespan_registers_and_deregisters(community: Community) -> None:
    async def inner(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("lifespan is handled by the fleet wrapper")

    app = fleet.fleet_lifecycle(inner)
    sent: list[dict[str, Any]] = []

    async def lifespan() -> None:
        messages = asyncio.Queue[dict[str, Any]]()
        await messages.put({"type": "lifespan.startup"})

        async def send(message: Any) -> None:
            sent.append(message)
            if message["type"] == "lifespan.startup.complete":
                await asyncio.to_thread(
                    wait_for, lambda: RelayInstance.objects.filter(
                        instance_id=fleet.instance_id()).exists()
                )
                await messages.put({"type": "lifespan.shutdown"})

        await app({"type": "lifespan"}, messages.get, send)

    asyncio.run(lifespan())
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert not RelayInstance.objects.exists()


class FleetMachine(RuleBasedStateMachine):
    """Writers come and go in any order; the verdict and the epoch follow the model:

    ready iff no offending writer is live; the epoch moves exactly once when the first offender
    appears (while it is live) and once when the last one has left, never otherwise.
    """

    def __init__(self) -> None:
        super().__init__()
        self.legacy: list[psycopg.Connection[Any]] = []
        self.other_key: list[psycopg.Connection[Any]] = []
        self.unstamped: list[RelayInstance] = []
        self.start_epoch = epoch()
        self.episodes = 0

    def offending(self) -> bool:
        return bool(self.legacy or self.other_key or self.unstamped)

    def evaluate(self) -> None:
        was_open = FleetEpisode.objects.filter(closed_at=None).exists()
        report = fresh()
        assert report.ready == (not self.offending())
        if self.offending() and not was_open:
            self.episodes += 1

    @rule(kind=st.sampled_from(["legacy", "other_key", "unstamped"]))
    def writer_joins(self, kind: str) -> None:
        if kind == "legacy":
            self.legacy.append(connect(application_name=LEGACY_NAME))
        elif kind == "other_key":
            self.other_key.append(connect(application_name=OTHER_KEY_NAME))
        else:
            self.unstamped.append(register(stamps=False))

    @rule(data=st.data())
    def writer_leaves(self, data: st.DataObject) -> None:
        pools = [pool for pool in (self.legacy, self.other_key, self.unstamped) if pool]
        if not pools:
            return
        pool = data.draw(st.sampled_from(pools))
        member = pool.pop(data.draw(st.integers(0, len(pool) - 1)))
        if isinstance(member, RelayInstance):
            member.delete()
        else:
            gone(member)

    @rule()
    def evaluate_rule(self) -> None:
        self.evaluate()

    @invariant()
    def epoch_moves_twice_per_episode(self) -> None:
        still_open = FleetEpisode.objects.filter(closed_at=None).exists()
        expected = 2 * self.episodes - (1 if still_open else 0)
        assert epoch() == self.start_epoch + expected

    def teardown(self) -> None:
        for conn in self.legacy + self.other_key:
            gone(conn)
        for instance in self.unstamped:
            instance.delete()
        self.legacy, self.other_key, self.unstamped = [], [], []
        fresh()
        assert not FleetEpisode.objects.filter(closed_at=None).exists()


def test_any_schedule_of_writers_keeps_verdict_and_epoch_consistent(
    community: Community,
) -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        FleetMachine,
        settings=hypothesis_settings(max_examples=12, stateful_step_count=12, deadline=None),
    )
    assert advertised()


def test_a_writer_seen_by_a_request_and_gone_before_the_refresh_still_costs_its_bump(
    community: Community,
) -> None:
    fresh()
    before = epoch()
    legacy = connect(application_name=LEGACY_NAME)
    try:
        seen = readiness.evaluate_readiness(use_cache=False)  # a request's verdict: no write
        assert not seen.item(4).passed
        assert epoch() == before
    finally:
        gone(legacy)
    # It left before any refresh: the verdict stays not ready until the bump is recorded...
    waiting = readiness.evaluate_readiness(use_cache=False)
    assert not waiting.ready and "not recorded yet" in waiting.item(4).found
    assert not advertised()
    assert epoch() == before
    # ...which the refresher does once, as a closed episode.
    fresh()
    assert epoch() == before + 1
    assert advertised()
    episode = FleetEpisode.objects.get(opened_epoch=before + 1)
    assert episode.closed_epoch == before + 1 and "seen by a request" in episode.reason
    fresh()
    assert epoch() == before + 1
