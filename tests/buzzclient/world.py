"""What the end-to-end client tests share: a community to write in, and waiting for rounds."""

from __future__ import annotations

import time

from artifacts.models import Community
from buzzclient import RoundSummary, Syncer
from tests.factories import (
    create_artifact,
    delete_artifact,
    make_channel,
    make_community,
    make_key,
    move_artifact,
    update_artifact,
)

HOST = "127.0.0.1"  # the relay URL's host names the community


def catch_up(syncer: Syncer, expected: dict[str, str], rounds: int = 8) -> list[RoundSummary]:
    """Rounds until the collection is `expected` (usually one). A round's fence also stops at
    the oldest open transaction of the database, so one that started before our write and is
    still open (the relay's own bookkeeping, say) leaves the write to a later round."""
    done = []
    for _ in range(rounds):
        done.append(syncer.run_round())
        if syncer.heads() == expected:
            return done
        time.sleep(0.5)
    raise AssertionError(f"collection never caught up: {done}")


def totals(summaries: list[RoundSummary]) -> tuple[int, int, int, int]:
    """(added, updated, removed, resets) over rounds: each change is counted once, however
    many rounds re-deliver it."""
    return (
        sum(s.added for s in summaries), sum(s.updated for s in summaries),
        sum(s.removed for s in summaries), sum(s.resets for s in summaries),
    )


class World:
    """A community with an author, a reader and three channels of artifacts."""

    def __init__(self) -> None:
        self.community: Community = make_community(host=HOST)
        self.alice, self.bob = make_key(), make_key()
        self.open_h = make_channel(self.community, owner=self.alice, name="open")
        self.member_h = make_channel(self.community, owner=self.alice, name="team",
                                     visibility="private", members=[self.bob])
        self.secret_h = make_channel(self.community, owner=self.alice, name="secret",
                                     visibility="private")
        self.heads: dict[str, tuple[str, str]] = {}  # d -> (channel, head id)

    def create(self, h: str, n: int = 1) -> list[str]:
        made = []
        for i in range(n):
            d, head = create_artifact(self.community, self.alice, h, title=f"item {i}")
            self.heads[d] = (h, head)
            made.append(d)
        return made

    def update(self, d: str) -> None:
        h, head = self.heads[d]
        self.heads[d] = (h, update_artifact(self.community, self.alice, d, h, prev=head,
                                            title="changed"))

    def delete(self, d: str) -> None:
        h, head = self.heads.pop(d)
        delete_artifact(self.community, self.alice, d, h, prev=head)

    def move(self, d: str, to: str) -> None:
        _h, head = self.heads[d]
        self.heads[d] = (to, move_artifact(self.community, self.alice, d, to, prev=head))

    def readable(self, channels: set[str]) -> dict[str, str]:
        return {d: head for d, (h, head) in self.heads.items() if h in channels}
