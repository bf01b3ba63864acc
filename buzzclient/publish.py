"""Writes: channels, members and artifact revisions, built as the relay accepts them and sent
over ``POST /event`` (PROTOCOL.md sections 2 and 4).

Each write is one signed event; the relay answers NIP-01's ``OK`` triple, which ``Published``
carries unchanged (``accepted``, ``message``: e.g. ``"restricted: cannot write in channel ..."``).
An artifact's ``update``, ``move``, ``delete`` and ``restore`` name the current head in ``prev``;
``Publisher`` finds it in the local collection (what the last sync stored) and, when the
collection does not hold the artifact (never synced, published since, or deleted), in the
relay's history of it. A stale local head is refused by the relay (``invalid: artifact head
changed``): sync, or name ``prev`` yourself.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

from buzzclient.errors import SyncError
from buzzclient.transport import RelayAddress, RelayHttp
from nostr.events import Event, first_tag, is_canonical_uuid, served_event, sign
from nostr.kinds import (
    KIND_ARTIFACT,
    KIND_CREATE_CHANNEL,
    KIND_PUT_MEMBER,
    KIND_REMOVE_MEMBER,
)
from nostr.schnorr import pubkey_from_secret

ROLES = ("member", "admin", "owner")
HISTORY_LIMIT = 1000  # the relay's page maximum; an artifact's history rarely comes near it


class ArtifactNotFound(SyncError):
    """Neither the local collection nor the relay's history (as this key reads it) holds it."""


@dataclass(frozen=True)
class Published:
    """The relay's answer to one write: NIP-01 ``OK`` (``accepted``, ``message``)."""

    event: Event
    accepted: bool
    message: str  # "" or "<prefix>: <reason>"; "duplicate: ..." is accepted too

    @property
    def event_id(self) -> str:
        return self.event.id

    def line(self) -> str:
        """The relay's answer, plainly: ``OK <id>`` or ``refused: <prefix>: <reason>``."""
        if self.accepted:
            return f"OK {self.event.id}" + (f" ({self.message})" if self.message else "")
        return f"refused: {self.message or 'no reason given'}"


def artifact_tags(
    *,
    op: str,
    d: str,
    channel: str,
    type: str,
    title: str | None,
    prev: str | None = None,
) -> list[list[str]]:
    """The NIP-AR envelope of a 45010 revision (PROTOCOL.md section 2): ``ar``, ``d``, ``h``,
    ``type``, ``op``, then ``title`` (every op but ``delete``) and ``prev`` (every op but
    ``create``)."""
    tags = [["ar", "1"], ["d", d], ["h", channel], ["type", type], ["op", op]]
    if title is not None and op != "delete":
        tags.append(["title", title])
    if prev is not None:
        tags.append(["prev", prev])
    return tags


def _uuid(value: str, what: str) -> str:
    if not is_canonical_uuid(value):
        raise ValueError(f"{what} {value!r} is not a lowercase canonical UUID")
    return value


class Publisher:
    """Writes to one relay (and so one community: the URL's host) as one key.

    ``db``, when given, is the collection file ``prev`` is looked up in (any collection this
    key keeps of this relay and community in it)."""

    def __init__(
        self,
        *,
        relay_url: str,
        secret_hex: str,
        db: str | Path | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        self.address = RelayAddress.parse(relay_url)
        self.secret = secret_hex
        self.pubkey = pubkey_from_secret(secret_hex)
        self.db = Path(db) if db is not None else None
        self.http = RelayHttp(self.address, secret_hex, client=http_client)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def publish(self, kind: int, tags: Sequence[Sequence[str]], content: str = "") -> Published:
        """Sign any event with this key and send it; the relay's ``OK`` answer."""
        event = sign(self.secret, kind=kind, tags=tags, content=content)
        accepted, message = self.http.publish(event)
        return Published(event, accepted, message)

    # Channels and members (NIP-29-style, kinds 9007, 9000, 9001).

    def create_channel(
        self, name: str, *, private: bool = False, channel: str | None = None
    ) -> Published:
        """A new channel (``h`` a fresh UUID unless given); the creator becomes its owner. Needs
        community admin rights unless the community lets anyone create channels."""
        h = _uuid(channel, "channel") if channel else str(uuid.uuid4())
        if not name.strip():
            raise ValueError("a channel needs a name")
        tags = [["h", h], ["name", name]]
        if private:
            tags.append(["private"])
        return self.publish(KIND_CREATE_CHANNEL, tags)

    def put_member(self, channel: str, pubkey: str, role: str = "member") -> Published:
        """Grant (or rejoin, or change the role of) ``pubkey`` in ``channel``."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}")
        return self.publish(KIND_PUT_MEMBER, [["h", _uuid(channel, "channel")],
                                              ["p", pubkey, role]])

    def remove_member(self, channel: str, pubkey: str) -> Published:
        return self.publish(KIND_REMOVE_MEMBER, [["h", _uuid(channel, "channel")], ["p", pubkey]])

    # Artifacts (NIP-AR, kind 45010).

    def create_artifact(
        self, *, channel: str, type: str, title: str, content: str = "", d: str | None = None
    ) -> Published:
        """A new artifact homed in ``channel``; its ``d`` is a fresh UUID unless given."""
        d = _uuid(d, "artifact id") if d else str(uuid.uuid4())
        tags = artifact_tags(op="create", d=d, channel=_uuid(channel, "channel"), type=type,
                             title=title)
        return self.publish(KIND_ARTIFACT, tags, content)

    def update_artifact(
        self, d: str, *, title: str | None = None, content: str | None = None,
        prev: str | None = None,
    ) -> Published:
        """A new revision; the title and content not given are the current head's."""
        head = self.current_head(d, prev=prev)
        return self._revise(head, "update", title=title, content=content)

    def move_artifact(self, d: str, to_channel: str, *, prev: str | None = None) -> Published:
        """Moves the artifact to another channel (write access to both is needed)."""
        head = self.current_head(d, prev=prev)
        return self._revise(head, "move", channel=_uuid(to_channel, "channel"))

    def delete_artifact(self, d: str, *, prev: str | None = None) -> Published:
        head = self.current_head(d, prev=prev)
        return self._revise(head, "delete", content="")

    def restore_artifact(
        self, d: str, *, title: str | None = None, content: str | None = None,
        prev: str | None = None,
    ) -> Published:
        """Brings a deleted artifact back, with the title and content it had before (unless
        given). The deletion is found in the relay's history: a sync forgets deleted items."""
        revisions = self.history(d)
        head = _find(revisions, prev) if prev else _tip(revisions)
        if head is None:
            raise ArtifactNotFound(f"artifact {d}: no revision {prev} in its history")
        before = _find(revisions, first_tag(head, "prev") or "")
        return self._revise(
            head, "restore",
            title=title or (first_tag(before, "title") if before else None),
            content=content if content is not None else (before.content if before else ""),
        )

    def _revise(
        self, head: Event, op: str, *, title: str | None = None, content: str | None = None,
        channel: str | None = None,
    ) -> Published:
        d = first_tag(head, "d") or ""
        kept_title = title or first_tag(head, "title")
        if kept_title is None and op != "delete":
            raise ValueError(f"artifact {d}: give a title (its head has none)")
        tags = artifact_tags(
            op=op, d=d, channel=channel or first_tag(head, "h") or "",
            type=first_tag(head, "type") or "", title=kept_title, prev=head.id,
        )
        return self.publish(KIND_ARTIFACT, tags, head.content if content is None else content)

    # Where prev comes from.

    def current_head(self, d: str, *, prev: str | None = None) -> Event:
        """The head revision of ``d``: the local collection's, else the relay's history's tip.
        With ``prev``, that revision (found the same way)."""
        _uuid(d, "artifact id")
        local = self.local_head(d)
        if local is not None and (prev is None or local.id == prev):
            return local
        revisions = self.history(d)
        head = _find(revisions, prev) if prev else _tip(revisions)
        if head is None:
            raise ArtifactNotFound(
                f"artifact {d} is not in the local collection nor readable on "
                f"{self.address.base_url}" + (f" (no revision {prev})" if prev else "")
            )
        return head

    def local_head(self, d: str) -> Event | None:
        """``d``'s head in the newest collection this key keeps of this relay in ``db``."""
        if self.db is None or not self.db.exists():
            return None
        try:
            uri = self.db.resolve().as_uri() + "?mode=ro"  # read only: a sync may be writing
            with closing(sqlite3.connect(uri, uri=True)) as connection:
                row = connection.execute(
                    "SELECT v.event FROM collection_artifacts AS v"
                    " JOIN collections AS c ON c.id = v.collection_id"
                    " WHERE v.relay = ? AND v.community = ? AND v.reader = ? AND v.d = ?"
                    " ORDER BY c.last_round_at DESC LIMIT 1",
                    (self.address.base_url, self.address.host, self.pubkey, d),
                ).fetchone()
        except sqlite3.Error as exc:
            raise SyncError(f"cannot read collection database {self.db}: {exc}") from None
        return served_event(orjson.loads(row[0])) if row else None

    def history(self, d: str) -> list[Event]:
        """The revisions of ``d`` this key may read (PROTOCOL.md section 5, ``history``)."""
        body = self.http.query({"artifact": "history", "#d": [d], "limit": HISTORY_LIMIT})
        answer = orjson.loads(body)
        if not isinstance(answer, list):
            raise SyncError(f"{self.address.base_url}: a history read answered {body[:200]!r}")
        return [served_event(item) for item in answer]


def _find(revisions: list[Event], event_id: str) -> Event | None:
    return next((event for event in revisions if event.id == event_id), None)


def _tip(revisions: list[Event]) -> Event | None:
    """The revision no other names as ``prev``: the head (the newest, should several qualify,
    as when a redacted revision leaves a gap in what this key may read)."""
    named = {first_tag(event, "prev") for event in revisions}
    tips = [event for event in revisions if event.id not in named]
    return max(tips, key=lambda event: (event.created_at, event.id), default=None)
