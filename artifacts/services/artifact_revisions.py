"""Artifact revisions (kind 45010, NIP-AR) and the relay's removal markers (kind 45011).

A head advances only by compare-and-swap on `prev`, under a per-artifact advisory lock (which
also serializes two creates of one `d`, when there is no row to lock yet) and the head's row
lock. Every accepted revision stamps the head; an accepted move also stamps its revision with
the old home (`source_channel_id`) and stores one relay-signed 45011 marker in the source.

What an error may say: channel problems are reported before anything about `d`, in the same
words for a channel that does not exist and one the author cannot read; an artifact whose home
the author cannot read answers exactly as an artifact that does not exist.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.conf import settings

from artifacts.models import ArtifactRevision
from artifacts.selectors.permissions import ChannelAccess, access_from_rows, access_statement
from artifacts.services.errors import Duplicate, Invalid, Restricted
from artifacts.services.tags import checked_tag, event_id_value, uuid_value
from artifacts.services.transactions import WriteContext, note_stored, store_statement
from artifacts.services.write_steps import Batch, Rows, Statement, WriteSteps
from nostr.events import Event, sign
from nostr.kinds import KIND_REMOVAL_MARKER

Op = ArtifactRevision.Op
ENVELOPE_TAGS = ("ar", "d", "h", "type", "title", "op", "root", "prev")
# NIP-AR: dot-separated lowercase ASCII components, each starting with a letter.
_TYPE = re.compile(r"[a-z][a-z0-9_-]*(?:\.[a-z][a-z0-9_-]*)*")
# NIP-AR allows 128 bytes; artifact_heads.artifact_type is varchar(100).
MAX_TYPE_CHARS = 100
MAX_TITLE_BYTES = 512
HEAD_UNAVAILABLE = "artifact head unavailable"


@dataclass(frozen=True, slots=True)
class Envelope:
    artifact_id: UUID
    home: UUID
    artifact_type: str
    op: str
    prev: str | None
    root: str | None


@dataclass(frozen=True, slots=True)
class Head:
    event_id: str
    channel_id: UUID
    artifact_type: str
    root: str | None
    deleted: bool


def parse_envelope(event: Event) -> Envelope:
    """The NIP-AR envelope of a 45010 event; raises `Invalid`."""
    values: dict[str, str] = {}
    for name in ENVELOPE_TAGS:
        tag = checked_tag(event, name, required=False)
        if tag is None:
            continue
        if len(tag) != 2:
            raise Invalid(f"{name} tag must have exactly one value")
        values[name] = tag[1]
    for name in ("ar", "d", "h", "type", "op"):
        if name not in values:
            raise Invalid(f"missing {name} tag")
    if values["ar"] != "1":
        raise Invalid("unsupported artifact envelope version (ar must be 1)")
    op = values["op"]
    if op not in Op.values:
        raise Invalid("op must be create, update, move, delete or restore")
    artifact_type = values["type"]
    if len(artifact_type) > MAX_TYPE_CHARS or not _TYPE.fullmatch(artifact_type):
        raise Invalid(
            "type must be dot-separated lowercase components starting with a letter"
            f" (at most {MAX_TYPE_CHARS} characters)"
        )
    prev = values.get("prev")
    if op == Op.CREATE and prev is not None:
        raise Invalid("create takes no prev tag")
    if op != Op.CREATE and prev is None:
        raise Invalid(f"{op} needs a prev tag naming the current revision")
    title = values.get("title")
    if title is None and op != Op.DELETE:
        raise Invalid(f"{op} needs a title tag")
    if title is not None and (not title.strip() or len(title.encode("utf-8")) > MAX_TITLE_BYTES):
        raise Invalid(f"title must be non-blank and at most {MAX_TITLE_BYTES} bytes")
    if op == Op.DELETE and event.content != "":
        raise Invalid("delete carries empty content")
    root = values.get("root")
    return Envelope(
        artifact_id=uuid_value(values["d"], "d"),
        home=uuid_value(values["h"], "h"),
        artifact_type=artifact_type,
        op=op,
        prev=event_id_value(prev, "prev") if prev is not None else None,
        root=event_id_value(root, "root") if root is not None else None,
    )


def require_writable(access: ChannelAccess) -> None:
    """Write access in a channel; the refusal does not tell "missing" from "private"."""
    if not access.readable:
        raise Restricted(f"cannot write in channel {access.channel_id}")
    if access.archived:
        raise Restricted(f"channel {access.channel_id} is archived")


def artifact_lock_key(community_id: int, artifact_id: UUID) -> int:
    """A signed 64-bit advisory-lock key for one artifact (collisions only serialize)."""
    digest = hashlib.sha256(b"buzz artifact\0%d\0" % community_id + artifact_id.bytes).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


_LOCK_SQL = "SELECT pg_advisory_xact_lock(%s)"
_HEAD_SQL = (
    "SELECT event_id, channel_id, artifact_type, root, deleted FROM artifact_heads"
    " WHERE community_id = %s AND artifact_id = %s FOR UPDATE"
)


def artifact_revision_steps(ctx: WriteContext, *, event: Event, now: int) -> WriteSteps:
    """Store and apply a verified 45010 event by its authenticated author, in steps
    (`write_steps`): one batch reads everything the decision needs, the finishing batch writes.

    Runs inside the ingest's write transaction. The first batch stores the event, reads the
    author's standing in the home channel, takes the artifact's advisory lock and then the
    head's row lock (in that order: the head is read after the lock is granted, so a create
    that committed while this one waited is seen). Raises `Duplicate`, `Invalid` or
    `Restricted` (the caller rolls everything back, the locks with it).
    """
    envelope = parse_envelope(event)
    author = event.pubkey
    community_id = ctx.community_id
    stored, access, _locked, head_rows = yield (
        store_statement(ctx, event=event, channel_id=envelope.home),
        access_statement(community_id, envelope.home, author),
        (_LOCK_SQL, [artifact_lock_key(community_id, envelope.artifact_id)]),
        (_HEAD_SQL, [community_id, envelope.artifact_id]),
    )
    if not note_stored(ctx, stored, event=event, channel_id=envelope.home):
        raise Duplicate("already have this event")
    home = access_from_rows(community_id, envelope.home, access)
    if not home.artifacts_enabled:
        raise Restricted("artifacts are disabled in this community")
    if not home.allows_type(envelope.artifact_type):
        raise Restricted(f"artifact type {envelope.artifact_type} is not allowed here")
    require_writable(home)
    head = Head(*head_rows[0]) if head_rows else None

    source = yield from _check_transition(ctx, envelope, head, home, author)
    finishing = [_advance_head(ctx, event, envelope, head, source)]
    if envelope.op == Op.MOVE:
        assert head is not None and source is not None
        marker = _removal_marker(envelope.artifact_id, source, head.event_id, now)
        finishing.append(store_statement(ctx, event=marker, channel_id=source))
        # Announced without reading the INSERT's row: the marker is new by construction (its
        # prev names the head this move replaces, which no other move can replace again).
        ctx.announce(event=marker, channel_id=source)
    return tuple(finishing)


def _check_transition(
    ctx: WriteContext, envelope: Envelope, head: Head | None, home: ChannelAccess, author: str
) -> Generator[Batch, list[Rows], UUID | None]:
    """NIP-AR's op rules against the locked head; returns the move's source channel."""
    if envelope.op == Op.CREATE:
        if head is not None:
            # Only that the identity is taken: never the existing artifact's home or type.
            raise Invalid("artifact identity is taken")
        return None
    if head is None:
        raise Invalid(HEAD_UNAVAILABLE)
    current = home
    if head.channel_id != envelope.home:
        (rows,) = yield (access_statement(ctx.community_id, head.channel_id, author),)
        current = access_from_rows(ctx.community_id, head.channel_id, rows)
        if not current.readable:
            raise Invalid(HEAD_UNAVAILABLE)
    if envelope.prev != head.event_id:
        raise Invalid("artifact head changed")
    if envelope.artifact_type != head.artifact_type:
        raise Invalid("artifact type is immutable")
    if head.deleted and envelope.op != Op.RESTORE:
        raise Invalid("artifact is deleted: only restore is accepted")
    if not head.deleted and envelope.op == Op.RESTORE:
        raise Invalid("artifact is not deleted: nothing to restore")
    if envelope.op == Op.MOVE:
        if head.channel_id == envelope.home:
            raise Invalid("move must change h")
        require_writable(current)
        return head.channel_id
    if head.channel_id != envelope.home:
        raise Invalid("only move changes h")
    if envelope.op == Op.DELETE and envelope.root != head.root:
        raise Invalid("delete preserves root")
    return None


def _advance_head(
    ctx: WriteContext,
    event: Event,
    envelope: Envelope,
    head: Head | None,
    source: UUID | None,
) -> Statement:
    """Record the revision and point the head at it: one statement, both stamped."""
    revision = (
        "INSERT INTO artifact_revisions (community_id, event_id, artifact_id, channel_id, op,"
        " prev_event_id, created_at, source_channel_id, modified_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, statement_timestamp())"
    )
    revision_params: list[Any] = [
        ctx.community_id, event.id, envelope.artifact_id, envelope.home, envelope.op,
        envelope.prev, event.created_at, source,
    ]
    deleted = envelope.op == Op.DELETE
    if head is None:
        head_sql = (
            "INSERT INTO artifact_heads (community_id, artifact_id, event_id, channel_id,"
            " artifact_type, root, deleted, created_at, modified_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, statement_timestamp())"
        )
        head_params: list[Any] = [
            ctx.community_id, envelope.artifact_id, event.id, envelope.home,
            envelope.artifact_type, envelope.root, deleted, event.created_at,
        ]
    else:
        head_sql = (
            "UPDATE artifact_heads SET event_id = %s, channel_id = %s, root = %s, deleted = %s,"
            " created_at = %s, modified_at = statement_timestamp()"
            " WHERE community_id = %s AND artifact_id = %s"
        )
        head_params = [
            event.id, envelope.home, envelope.root, deleted, event.created_at,
            ctx.community_id, envelope.artifact_id,
        ]
    return f"WITH revision AS ({revision} RETURNING 1) {head_sql}", revision_params + head_params


def _removal_marker(artifact_id: UUID, source: UUID, prev: str, now: int) -> Event:
    """The relay-signed 45011 in the source channel: identity, source and replay position only."""
    return sign(
        settings.RELAY_SIGNING_SECRET,
        kind=KIND_REMOVAL_MARKER,
        tags=[
            ["ar", "1"],
            ["d", str(artifact_id)],
            ["h", str(source)],
            ["reason", "moved"],
            ["prev", prev],
        ],
        content="",
        created_at=now,
    )
