"""Random sequences of artifact ops against a model of NIP-AR's rules.

Every op the model calls legal must be accepted and every other refused; after each step each
head is the artifact's last accepted revision, and every accepted move has exactly one marker.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from itertools import count

import orjson
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from artifacts.models import ArtifactHead, ArtifactRevision, Event
from nostr.events import first_tag, served_event
from tests.factories import artifact_tags, make_channel, make_community, make_key, write

OPS = ("update", "move", "delete", "restore", "create")


@dataclass
class ModelArtifact:
    head: str
    home: str
    deleted: bool = False
    stale: list[str] = field(default_factory=list)  # earlier revisions (prev candidates)
    moves: int = 0


class ArtifactOps(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.key = make_key()
        self.community = make_community(f"{uuid.uuid4().hex[:12]}.example")
        self.channels = [make_channel(self.community) for _ in range(3)]
        self.artifacts: dict[str, ModelArtifact] = {}
        self.clock = count()
        self.now = int(time.time())

    def _write(self, op: str, d: str, h: str, prev: str | None, kind_type: str) -> tuple[bool, str]:
        content = "" if op == "delete" else f'{{"n":{next(self.clock)}}}'
        tags = artifact_tags(op=op, d=d, h=h, prev=prev, type=kind_type)
        result = write(self.community, self.key, 45010, tags, content, expect=None,
                       created_at=self.now - next(self.clock))
        return result.accepted and result.message == "", result.event_id

    @rule(channel=st.integers(0, 2))
    def create(self, channel: int) -> None:
        d = str(uuid.uuid4())
        accepted, event_id = self._write("create", d, self.channels[channel], None, "buzz.task")
        assert accepted
        self.artifacts[d] = ModelArtifact(head=event_id, home=self.channels[channel])

    @rule(
        data=st.data(),
        op=st.sampled_from(OPS),
        channel=st.integers(0, 2),
        stale_prev=st.booleans(),
        other_type=st.integers(0, 9),
    )
    def change(self, data: st.DataObject, op: str, channel: int, stale_prev: bool,
               other_type: int) -> None:
        if not self.artifacts:
            return
        # In creation order: the same draws pick the same artifact when Hypothesis replays a
        # case (sorted, the random uuids gave each replay another order, and another artifact).
        d = data.draw(st.sampled_from(list(self.artifacts)))
        model = self.artifacts[d]
        # Moves go anywhere (their own home is illegal); other ops mostly keep h.
        if op == "move":
            h = self.channels[channel]
        elif channel == 2:
            h = self.channels[(self.channels.index(model.home) + 1) % 3]
        else:
            h = model.home
        prev: str | None = model.head
        if stale_prev and model.stale:
            prev = data.draw(st.sampled_from(model.stale))
        if op == "create":
            prev = None
        kind_type = "buzz.note" if other_type == 0 else "buzz.task"
        legal = (
            op != "create"
            and prev == model.head
            and kind_type == "buzz.task"
            and (op == "restore") == model.deleted
            and ((op == "move") == (h != model.home))
        )
        accepted, event_id = self._write(op, d, h, prev, kind_type)
        assert accepted == legal, (op, legal)
        if accepted:
            model.stale.append(model.head)
            model.head = event_id
            model.deleted = op == "delete"
            if op == "move":
                model.moves += 1
                model.home = h

    @invariant()
    def heads_are_the_last_accepted_revisions(self) -> None:
        heads = dict(
            ArtifactHead.objects.filter(community=self.community).values_list(
                "artifact_id", "event_id"
            )
        )
        assert {str(k): v for k, v in heads.items()} == {
            d: m.head for d, m in self.artifacts.items()
        }

    @invariant()
    def every_accepted_move_has_exactly_one_marker(self) -> None:
        markers: Counter[str] = Counter()
        for raw in Event.objects.filter(community=self.community, kind=45011).values_list(
            "raw", flat=True
        ):
            markers[first_tag(served_event(orjson.loads(raw)), "d") or ""] += 1
        moves = Counter(
            str(d)
            for d in ArtifactRevision.objects.filter(
                community=self.community, source_channel_id__isnull=False
            ).values_list("artifact_id", flat=True)
        )
        expected = Counter({d: m.moves for d, m in self.artifacts.items() if m.moves})
        assert markers == moves == expected


@pytest.mark.django_db
def test_random_artifact_op_sequences_keep_heads_and_markers_consistent() -> None:
    run_state_machine_as_test(
        ArtifactOps, settings=settings(max_examples=20, stateful_step_count=20, deadline=None)
    )
