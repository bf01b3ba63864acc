"""Test data built through the real services, so test data is stamped like production data.

Keys: `make_key()` returns a `Key` (secret + pubkey); every helper taking `who` accepts a `Key`,
a secret or (where no signature is needed) a pubkey.

    community = make_community()                         # host team.example
    alice, bob = make_key(), make_key()
    h = make_channel(community, owner=alice, visibility="private", members=[bob])
    d, head = create_artifact(community, alice, h)       # accepted, or the test fails
    head = update_artifact(community, alice, d, h, prev=head, title="new title")
    result = write(community, bob, 9001, [["h", h], ["p", bob.pubkey]])
    response = signed_post(Client(), "/event", alice, event)   # NIP-98 signed POST
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from django.test import Client

from artifacts.models import Community
from artifacts.services.channels import channel_create
from artifacts.services.communities import community_create
from artifacts.services.ingest import IngestResult, check_event, ingest_event
from artifacts.services.members import member_put
from nostr.events import Event as NostrEvent
from nostr.events import sign_event
from nostr.nip98 import make_nip98_header
from nostr.schnorr import generate_secret, pubkey_from_secret

DEFAULT_HOST = "team.example"
DEFAULT_TYPE = "buzz.task"


@dataclass(frozen=True, slots=True)
class Key:
    secret: str
    pubkey: str

    def __str__(self) -> str:
        return self.pubkey


def make_key(secret: str | None = None) -> Key:
    secret = secret or generate_secret()
    return Key(secret=secret, pubkey=pubkey_from_secret(secret))


def _secret(who: Key | str) -> str:
    return who.secret if isinstance(who, Key) else who


def _pubkey(who: Key | str) -> str:
    """A Key's pubkey; a bare 64-hex string is taken as a pubkey."""
    return who.pubkey if isinstance(who, Key) else who


def make_community(
    host: str = DEFAULT_HOST,
    name: str | None = None,
    *,
    admins: Iterable[Key | str] = (),
    artifacts_enabled: bool = True,
    artifact_types: Sequence[str] | None = None,
    open_channel_creation: bool = False,
) -> Community:
    return community_create(
        host=host,
        name=name or host,
        admin_pubkeys=[_pubkey(a) for a in admins],
        artifacts_enabled=artifacts_enabled,
        artifact_types=artifact_types,
        open_channel_creation=open_channel_creation,
    )


def make_channel(
    community: Community,
    *,
    channel_id: str | None = None,
    name: str = "general",
    visibility: str = "open",
    owner: Key | str | None = None,
    members: Iterable[Key | str] = (),
) -> str:
    """A channel created through the service; returns its id (canonical UUID string)."""
    h = channel_id or str(uuid.uuid4())
    channel_create(
        community_id=community.pk,
        channel_id=uuid.UUID(h),
        name=name,
        visibility=visibility,
        created_by=_pubkey(owner) if owner is not None else "",
    )
    for member in members:
        add_member(community, h, member)
    return h


def add_member(
    community: Community, channel_id: str, who: Key | str, role: str = "member"
) -> bool:
    """Grant (or rejoin, or change role) through the service; False when nothing changed."""
    return member_put(
        community_id=community.pk,
        channel_id=uuid.UUID(str(channel_id)),
        pubkey=_pubkey(who),
        role=role,
    )


def signed_event(
    who: Key | str,
    kind: int,
    tags: Iterable[Sequence[str]],
    content: str = "",
    *,
    created_at: int | None = None,
) -> dict[str, Any]:
    return sign_event(_secret(who), kind=kind, tags=tags, content=content, created_at=created_at)


def write(
    community: Community,
    who: Key | str,
    kind: int,
    tags: Iterable[Sequence[str]],
    content: str = "",
    *,
    created_at: int | None = None,
    expect: bool | None = True,
) -> IngestResult:
    """Sign and ingest one event as its author; asserts the outcome unless `expect` is None.

    `expect=True` (default) asserts a fresh acceptance (not a duplicate), `expect=False` a
    refusal.
    """
    event = signed_event(who, kind, tags, content, created_at=created_at)
    result = ingest_event(
        community=community, raw=orjson.dumps(event), authenticated_pubkeys=(event["pubkey"],)
    )
    if expect is True:
        assert result.accepted and result.message == "", result.as_ok()
    elif expect is False:
        assert not result.accepted, result.as_ok()
    return result


def artifact_tags(
    *,
    op: str,
    d: str,
    h: str,
    prev: str | None = None,
    type: str = DEFAULT_TYPE,
    title: str | None = "A task",
    root: str | None = None,
    extra: Iterable[Sequence[str]] = (),
) -> list[list[str]]:
    """The NIP-AR envelope (title omitted for delete unless given) plus `extra` tags."""
    tags = [["ar", "1"], ["d", d], ["h", h], ["type", type], ["op", op]]
    if title is not None and op != "delete":
        tags.append(["title", title])
    if prev is not None:
        tags.append(["prev", prev])
    if root is not None:
        tags.append(["root", root])
    tags.extend(list(tag) for tag in extra)
    return tags


def artifact_op(
    community: Community,
    who: Key | str,
    *,
    op: str,
    d: str,
    h: str,
    prev: str | None = None,
    type: str = DEFAULT_TYPE,
    title: str = "A task",
    content: str | None = None,
    extra: Iterable[Sequence[str]] = (),
    expect: bool | None = True,
) -> IngestResult:
    """Any artifact op; content defaults to a small JSON payload ("" for delete)."""
    if content is None:
        content = "" if op == "delete" else '{"version":1}'
    tags = artifact_tags(op=op, d=d, h=h, prev=prev, type=type, title=title, extra=extra)
    return write(community, who, 45010, tags, content, expect=expect)


def create_artifact(
    community: Community,
    who: Key | str,
    h: str,
    *,
    d: str | None = None,
    type: str = DEFAULT_TYPE,
    title: str = "A task",
    content: str | None = None,
    extra: Iterable[Sequence[str]] = (),
) -> tuple[str, str]:
    """Create an artifact (asserting acceptance); returns `(d, head event id)`."""
    d = d or str(uuid.uuid4())
    result = artifact_op(
        community, who, op="create", d=d, h=h, type=type, title=title, content=content,
        extra=extra,
    )
    return d, result.event_id


def update_artifact(
    community: Community, who: Key | str, d: str, h: str, *, prev: str, **kwargs: Any
) -> str:
    """Accepted update; returns the new head id."""
    return artifact_op(community, who, op="update", d=d, h=h, prev=prev, **kwargs).event_id


def move_artifact(
    community: Community, who: Key | str, d: str, to: str, *, prev: str, **kwargs: Any
) -> str:
    """Accepted move to channel `to`; returns the new head id."""
    return artifact_op(community, who, op="move", d=d, h=to, prev=prev, **kwargs).event_id


def delete_artifact(
    community: Community, who: Key | str, d: str, h: str, *, prev: str, **kwargs: Any
) -> str:
    return artifact_op(community, who, op="delete", d=d, h=h, prev=prev, **kwargs).event_id


def restore_artifact(
    community: Community, who: Key | str, d: str, h: str, *, prev: str, **kwargs: Any
) -> str:
    return artifact_op(community, who, op="restore", d=d, h=h, prev=prev, **kwargs).event_id


def redact(community: Community, who: Key | str, h: str, event_id: str) -> IngestResult:
    return write(community, who, 9005, [["h", h], ["e", event_id]])


def nip98_header(who: Key | str, url: str, method: str, body: bytes | None = None) -> str:
    """An `Authorization: Nostr ...` value (with a random nonce, so each call is unique)."""
    return make_nip98_header(_secret(who), url=url, method=method, body=body)


def nip98_headers(
    who: Key | str, url: str, method: str = "POST", body: bytes | None = None
) -> dict[str, str]:
    """`headers=` for django.test.Client or httpx."""
    return {"Authorization": nip98_header(who, url, method, body)}


def signed_post(
    client: Client,
    path: str,
    who: Key | str,
    payload: Any,
    *,
    host: str = DEFAULT_HOST,
    scheme: str = "http",
) -> Any:
    """POST `payload` (bytes sent as is, anything else as JSON) with NIP-98 for `path`."""
    body = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    url = f"{scheme}://{host}{path}"
    return client.post(
        path,
        data=body,
        content_type="application/json",
        headers=nip98_headers(who, url, "POST", body),
        HTTP_HOST=host,
        secure=scheme == "https",
    )


def checked_event(community: Community, event: dict[str, Any], now: int) -> NostrEvent:
    """`event` through the relay's checks, as its author's authenticated write at `now`."""
    checked = check_event(
        community=community, raw=orjson.dumps(event), authenticated_pubkeys=(event["pubkey"],),
        now=now,
    )
    assert isinstance(checked, NostrEvent), checked
    return checked
