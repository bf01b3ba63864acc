"""The model-based test of incremental reads (DESIGN.md, correctness model).

Several readers keep collections by rounds (random page limits) while random writes of every
kind land, some between the pages of a round: artifact create, update, move, delete, restore,
redaction; grants, removals, rejoins; visibility changes, channel creation, deletion, restore,
archive; policy and admin list changes. The readers: a member of the private channels, a
non-member, a community admin who is not a member, one who keeps being removed and re-added,
and a member syncing with a `#h`/`#type` filter; each of them twice, once without opting in to
incremental view changes (every view change resets) and once with `view_changes: "incremental"`
(suffix `+`: grants, removals, rejoins and visibility changes come as `removed_channels` and a
catch-up, applied by each item's stored home). The expectation is a pure-Python statement of
readability (tests/artifacts/selectors/reference.py) over the tables.

Properties, checked on every page:
- no page carries an event its reader cannot read (with the filter) when the page is served;
- no page names an artifact that never lived in a channel (within the filter) its reader could
  read at the time, nor a channel (`removed_channels`) its reader never could read;
- a round with no write during it leaves the collection equal to the expectation (a fresh full
  read);
- an opted-in reader resets exactly where the contract requires it: on its first page, and on
  the first page after its enablement or allowed types (within the filter) changed; never for a
  change of channels, whatever the size of its view (the machine also runs with 1, 256, 257
  and 5,000 more open channels in every unfiltered view);
and at the end, after a final quiet round, every collection equals a fresh full read and the
expectation; rounds terminate (a round that does not finish within 10,000 pages fails). Resets
are counted per reader and the opted-in readers' are checked against the rule above. The overlap
is 0, so the fence alone must deliver every write; a second run keeps the 120 s overlap with the
re-read, not re-sent rule on (every write of a run lies within it, so every continuation re-reads
them all and must send only what its previous round's first page had not seen).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import orjson
import pytest
from django.db import connection
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from artifacts.models import ArtifactHead, ChannelSet
from artifacts.selectors import async_reads
from artifacts.services.channels import channel_archive, channel_restore, channel_unarchive
from artifacts.services.communities import community_update_policy
from tests.artifacts.selectors.reference import World, load_world
from tests.artifacts.selectors.replica import Replica, tag
from tests.factories import artifact_op, make_channel, make_community, make_key, write

TYPES = ("buzz.task", "buzz.note")


class SyncModel(RuleBasedStateMachine):
    overlap = timedelta(0)
    # Open channels without artifacts added to every unfiltered reader's view before the first
    # round: views below and above any bound a token could carry inline (the writes below land
    # in the other channels, so every view change is one of them).
    WIDE = 0
    # Private channels of which the member and the flaky reader are members, granted and removed
    # all at once by a rule of their own: their private channels and the catch-up sets then
    # exceed what a token carries inline, and are stored by digest.
    WIDE_PRIVATE = 0
    # How the replicas read their pages (tests/artifacts/selectors/replica.py).
    DRIVER = "sync"

    def __init__(self) -> None:
        super().__init__()
        self.owner, self.admin = make_key(), make_key()
        self.member, self.outsider, self.flaky = make_key(), make_key(), make_key()
        self.community = make_community(
            host=f"m{uuid.uuid4().hex[:16]}.example", admins=[self.admin]
        )
        if self.WIDE:
            with connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO channels (community_id, channel_id, name, visibility,"
                    " created_by, created_at) SELECT %s, gen_random_uuid(), 'wide', 'open', '',"
                    " now() FROM generate_series(1, %s)", [self.community.pk, self.WIDE])
        self.wide_private = [
            make_channel(self.community, owner=self.owner, visibility="private",
                         members=[self.member, self.flaky])
            for _ in range(self.WIDE_PRIVATE)
        ]
        self.channels = [
            make_channel(self.community, owner=self.owner),
            make_channel(self.community, owner=self.owner),
            make_channel(self.community, owner=self.owner, visibility="private",
                         members=[self.member, self.flaky]),
            make_channel(self.community, owner=self.owner, visibility="private",
                         members=[self.member]),
        ]
        self.readers = [self.member, self.outsider, self.admin, self.flaky]
        self.replicas: dict[str, Replica] = {}
        for suffix, view_changes in (("", None), ("+", "incremental")):
            for name, who, filtered in (("member", self.member, False),
                                        ("outsider", self.outsider, False),
                                        ("admin", self.admin, False),
                                        ("flaky", self.flaky, False),
                                        ("filtered", self.member, True)):
                self.replicas[name + suffix] = Replica(
                    self.community, who.pubkey, view_changes=view_changes,
                    overlap=self.overlap,
                    channels=[self.channels[0], self.channels[2]] if filtered else None,
                    types=["buzz.task"] if filtered else None,
                    driver=self.DRIVER,
                )
        self.artifacts: list[str] = []
        self.ever: dict[str, set[str]] = {name: set() for name in self.replicas}
        # Channels each reader could read (within its filter) at some point.
        self.ever_channels: dict[str, set[str]] = {name: set() for name in self.replicas}
        # The reader's view summary (enablement, allowed types within the filter) at its last
        # page, and how many pages reset it.
        self.summaries: dict[str, tuple[bool, list[str] | None] | None] = dict.fromkeys(
            self.replicas)
        self.resets: dict[str, int] = dict.fromkeys(self.replicas, 0)
        self.clean: dict[str, bool] = {name: False for name in self.replicas}
        self.world = self.observe()

    # --- the expectation -------------------------------------------------------------------

    def observe(self) -> World:
        """Read the world after a write: which artifacts each reader could see named."""
        world = load_world(self.community)
        for name, replica in self.replicas.items():
            wanted_channels = replica.filter.get("#h")
            wanted_types = replica.filter.get("#type")
            # The wide channels never change: they are in every unfiltered view throughout.
            self.ever_channels[name] |= {
                h for h in (world.channels if wanted_channels is None else wanted_channels)
                if h in world.channels and world.channel_readable(h, replica.reader)
            }
            for d, (_event, home, kind, _deleted, _redacted) in world.heads.items():
                if not world.channel_readable(home, replica.reader):
                    continue
                if wanted_channels is not None and home not in wanted_channels:
                    continue
                if wanted_types is not None and kind not in wanted_types:
                    continue
                self.ever[name].add(d)
        return world

    def wrote(self) -> None:
        for name in self.clean:
            self.clean[name] = False
        self.world = self.observe()

    def summary(self, name: str) -> tuple[bool, list[str] | None]:
        """What of the reader's view is not channels, as the relay compares it."""
        wanted = self.replicas[name].filter.get("#type")
        allowed = self.world.types
        if allowed is None:
            types = None if wanted is None else sorted(set(wanted))
        else:
            types = sorted(allowed & set(wanted)) if wanted is not None else sorted(allowed)
        return self.world.enabled, types

    def expected(self, name: str) -> dict[str, str]:
        replica = self.replicas[name]
        return self.world.readable(
            replica.reader, channels=replica.filter.get("#h"), types=replica.filter.get("#type")
        )

    # --- writes ------------------------------------------------------------------------------

    @rule(channel=st.integers(0, 50), kind=st.sampled_from(TYPES))
    def create_artifact(self, channel: int, kind: str) -> None:
        d = str(uuid.uuid4())
        h = self.channels[channel % len(self.channels)]
        result = artifact_op(self.community, self.owner, op="create", d=d, h=h, type=kind,
                             expect=None)
        if result.accepted:
            self.artifacts.append(d)
        self.wrote()

    @rule(pick=st.integers(0, 50), choice=st.integers(0, 50), channel=st.integers(0, 50))
    def change_artifact(self, pick: int, choice: int, channel: int) -> None:
        if not self.artifacts:
            return
        d = self.artifacts[pick % len(self.artifacts)]
        head = ArtifactHead.objects.get(community=self.community, artifact_id=d)
        home = str(head.channel_id)
        if head.deleted:
            op, h = "restore", home
        else:
            op = ("update", "delete", "move")[choice % 3]
            h = home
            if op == "move":
                others = [c for c in self.channels if c != home]
                h = others[channel % len(others)]
        artifact_op(self.community, self.owner, op=op, d=d, h=h, prev=head.event_id,
                    type=head.artifact_type, expect=None)
        self.wrote()

    @rule(pick=st.integers(0, 50))
    def redact_head(self, pick: int) -> None:
        if not self.artifacts:
            return
        d = self.artifacts[pick % len(self.artifacts)]
        head = ArtifactHead.objects.get(community=self.community, artifact_id=d)
        write(self.community, self.owner, 9005, [["h", str(head.channel_id)], ["e", head.event_id]],
              expect=None)
        self.wrote()

    @rule(reader=st.integers(0, 50), channel=st.integers(0, 50), grant=st.booleans())
    def membership(self, reader: int, channel: int, grant: bool) -> None:
        who = self.readers[reader % len(self.readers)]
        h = self.channels[channel % len(self.channels)]
        kind = 9000 if grant else 9001
        write(self.community, self.owner, kind, [["h", h], ["p", who.pubkey]], expect=None)
        self.wrote()

    @rule(reader=st.integers(0, 50), grant=st.booleans())
    def bulk_membership(self, reader: int, grant: bool) -> None:
        if not self.wide_private:
            return
        who = self.readers[reader % len(self.readers)]
        for h in self.wide_private:
            write(self.community, self.owner, 9000 if grant else 9001,
                  [["h", h], ["p", who.pubkey]], expect=None)
        self.wrote()

    @rule(channel=st.integers(0, 50), public=st.booleans())
    def visibility(self, channel: int, public: bool) -> None:
        h = self.channels[channel % len(self.channels)]
        flag = "public" if public else "private"
        write(self.community, self.owner, 9002, [["h", h], [flag]], expect=None)
        self.wrote()

    @rule(private=st.booleans())
    def create_channel(self, private: bool) -> None:
        if len(self.channels) < 7:
            h = str(uuid.uuid4())
            tags = [["h", h], ["name", "new"]] + ([["private"]] if private else [])
            write(self.community, self.admin, 9007, tags, expect=None)
            # The community admin created it and owns it; the usual owner writes there too.
            write(self.community, self.admin, 9000, [["h", h], ["p", self.owner.pubkey, "owner"]],
                  expect=None)
            self.channels.append(h)
            self.wrote()

    @rule(channel=st.integers(0, 50), action=st.sampled_from(
        ["delete", "restore", "archive", "unarchive"]))
    def operate_channel(self, channel: int, action: str) -> None:
        h = self.channels[channel % len(self.channels)]
        if action == "delete":
            write(self.community, self.owner, 9008, [["h", h]], expect=None)
        else:
            service = {"restore": channel_restore, "archive": channel_archive,
                       "unarchive": channel_unarchive}[action]
            service(community_id=self.community.pk, channel_id=uuid.UUID(h))
        self.wrote()

    @rule(enabled=st.sampled_from([True, True, False]),
          types=st.sampled_from([None, ["buzz.task"], ["buzz.note"], list(TYPES)]))
    def policy(self, enabled: bool, types: list[str] | None) -> None:
        community_update_policy(
            community_id=self.community.pk, artifacts_enabled=enabled, artifact_types=types
        )
        self.wrote()

    @rule(with_outsider=st.booleans())
    def admin_list(self, with_outsider: bool) -> None:
        admins = [self.admin.pubkey] + ([self.outsider.pubkey] if with_outsider else [])
        community_update_policy(community_id=self.community.pk, admin_pubkeys=admins)
        self.wrote()

    # --- reads -------------------------------------------------------------------------------

    @rule(name=st.sampled_from(["member", "outsider", "admin", "flaky", "filtered", "member+",
                                "outsider+", "admin+", "flaky+", "filtered+"]),
          limit=st.integers(1, 4))
    def page(self, name: str, limit: int) -> None:
        replica = self.replicas[name]
        starts_round = not replica.pages or not replica.pages[-1].more
        first_page = replica.token is None
        page = replica.page(limit)
        if starts_round or page.reset:
            self.clean[name] = True
        self.resets[name] += page.reset
        summary, self.summaries[name] = self.summaries[name], self.summary(name)
        if replica.view_changes == "incremental":
            required = first_page or summary != self.summaries[name]
            assert page.reset == required, (name, page.reset_reason, "reset against the rule")
        else:
            assert not page.removed_channels, (name, "removed_channels without opting in")
        for h in page.removed_channels:
            assert h in self.ever_channels[name], (name, h, "named a channel it never could read")
        expected = self.expected(name)
        for raw in page.events:
            event = orjson.loads(raw)
            d = tag(event, "d")
            assert d in expected and expected[d] == event["id"], (name, d, "unreadable event")
        named = [tag(orjson.loads(raw), "d") for raw in page.events] + [
            d for d, _ in page.removed
        ]
        assert len(named) <= limit and len(named) == len(set(named))
        for d in named:
            assert d in self.ever[name], (name, d, "named an artifact it never could read")
        if not page.more and self.clean[name]:
            assert replica.heads() == expected, (name, "quiet round left a wrong collection")

    @invariant()
    def tokens_are_opaque(self) -> None:
        for replica in self.replicas.values():
            if replica.token is not None:
                assert replica.reader not in replica.token

    def teardown(self) -> None:
        print("resets per reader:", self.resets)
        if self.WIDE_PRIVATE and any(replica.pages for replica in self.replicas.values()):
            stored = ChannelSet.objects.filter(community_id=self.community.pk).count()
            print("stored channel sets:", stored)
        try:
            for name, replica in self.replicas.items():
                if replica.pages and replica.pages[-1].more:
                    replica.round(limit=3)  # the round under way saw writes: finish it first
                replica.round(limit=3)  # then one whole quiet round
                expected = self.expected(name)
                assert replica.heads() == expected, (name, "after a final quiet round")
                assert replica.fresh() == expected
            if self.DRIVER != "sync":
                # A new reader of the open channels alone: its second round's first page may
                # be quiet (no private or catch-up set in its token), so every example reads
                # at least one continuation the way the edge guesses one.
                newcomer = Replica(self.community, make_key().pubkey, overlap=self.overlap,
                                   driver=self.DRIVER)
                self.replicas["newcomer"] = newcomer  # closed below with the others
                newcomer.round(limit=3)
                newcomer.round(limit=3)
                assert newcomer.heads() == newcomer.fresh(), "newcomer after a second round"
        finally:
            # The async driver's connections: one left in a failed page's transaction would
            # hold its locks against the test database's teardown.
            for replica in self.replicas.values():
                replica.close()


def _run(model: type[SyncModel], examples: int, steps: int) -> None:
    run_state_machine_as_test(
        model,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )


class SyncModelWithOverlap(SyncModel):
    overlap = timedelta(seconds=120)


class StoredSetsSyncModel(SyncModel):
    WIDE_PRIVATE = 25


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("model", "examples"), [(SyncModel, 25), (SyncModelWithOverlap, 10)],
                         ids=["overlap-0", "overlap-120s-re-read-not-re-sent"])
def test_incremental_reads_model(model: type[SyncModel], examples: int) -> None:
    _run(model, examples, 40)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_incremental_reads_model_with_stored_sets() -> None:
    """25 private channels granted and removed at once: private channels and catch-up sets
    past the token's inline bounds (stored by digest), with every property unchanged."""
    _run(StoredSetsSyncModel, 6, 30)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("wide", "examples"), [(1, 4), (256, 4), (257, 4), (5000, 2)])
def test_incremental_reads_model_with_wide_views(wide: int, examples: int) -> None:
    """The same machine with views of 1, 256, 257 and 5,000 more open channels: view changes
    stay incremental (never a reset for a change of channels) and every property holds. Few
    examples: each observation reads the whole community."""
    _run(type(f"WideSyncModel{wide}", (SyncModel,), {"WIDE": wide}), examples, 30)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("model", "examples"),
    [(SyncModel, 8), (SyncModelWithOverlap, 6), (StoredSetsSyncModel, 6)],
    ids=["overlap-0", "overlap-120s-re-read-not-re-sent", "stored-sets"],
)
@pytest.mark.parametrize("driver", ["async", "guess"])
def test_incremental_reads_model_as_the_http_edge_reads(
    model: type[SyncModel], examples: int, driver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same machine, its pages read by the HTTP edge's driver (`async_reads.begin_read`
    and `read_page_async` on a connection of the read pool's class) instead of Django's: the
    same statements (`rounds.page_steps`), a different transaction, fence, cursor and store
    of the sets a token names by digest. Every continuation is guessed quiet: "async" sends
    its first statement and COMMIT in one message, "guess" in the page's first message (before
    the fence is known, the pending range up to infinity); a page that needed more is read
    again in a new snapshot (both outcomes, one by one: test_async_reads)."""
    monkeypatch.setattr(async_reads, "_expect_quiet", lambda community_id: True)
    outcomes = {"quiet": 0, "read again": 0}
    guessed = "_quiet_page" if driver == "async" else "_guessed_page"
    guess = getattr(async_reads, guessed)

    def count(page: Any) -> Any:
        outcomes["quiet" if page is not None else "read again"] += 1
        return page

    async def counted(cursor: Any, steps: Any) -> Any:
        return count(await guess(cursor, steps))

    monkeypatch.setattr(async_reads, guessed, counted if driver == "async" else (
        lambda steps, rows: count(guess(steps, rows))))
    _run(type(f"Edge{model.__name__}", (model,), {"DRIVER": driver}), examples, 30)
    print("guessed quiet:", outcomes)
    assert sum(outcomes.values()) > 0, "no continuation page was guessed quiet"
