"""The one ingest service every entry point uses (POST /event, WebSocket EVENT).

Order (PROTOCOL.md section 2): shape and signature (`invalid:`), author is an authenticated
pubkey (`restricted:`), kind is served (`blocked:`), then one write transaction under the write
budgets: store the event (already stored: `OK true "duplicate: ..."`, nothing else happens),
authorize and apply it (`invalid:` / `restricted:`, everything rolled back). Database trouble
answers `error:`; the result says which, so HTTP can answer 503.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
import psycopg
from django.conf import settings
from django.db import DatabaseError, OperationalError

from artifacts.models import Community
from artifacts.services.artifact_revisions import artifact_revision_steps
from artifacts.services.channels import (
    channel_create_steps,
    channel_delete_steps,
    channel_update_steps,
)
from artifacts.services.errors import Duplicate, WriteRefused
from artifacts.services.members import member_put_steps, member_remove_steps
from artifacts.services.redactions import event_redact_steps
from artifacts.services.tags import channel_tag
from artifacts.services.transactions import WriteContext, write_transaction
from artifacts.services.write_steps import WriteSteps, run_write_steps
from nostr.events import (
    DEFAULT_LIMITS,
    Event,
    EventLimits,
    InvalidEvent,
    check_signature,
    is_lower_hex,
    parse_event_unverified,
)
from nostr.kinds import (
    KIND_ARTIFACT,
    KIND_CREATE_CHANNEL,
    KIND_DELETE_CHANNEL,
    KIND_DELETION,
    KIND_EDIT_CHANNEL,
    KIND_PUT_MEMBER,
    KIND_REDACTION,
    KIND_REMOVAL_MARKER,
    KIND_REMOVE_MEMBER,
)
from relaycore.db import is_statement_timeout

logger = logging.getLogger(__name__)

class StepsHandler(Protocol):
    """What stores and applies one kind's verified event, as statements (`write_steps`), which
    either driver runs: Django's connection (`apply_event`) or the server loop's asyncio one
    (`async_ingest`)."""

    def __call__(self, *, ctx: WriteContext, event: Event, now: int) -> WriteSteps: ...


STEPS_HANDLERS: dict[int, StepsHandler] = {
    KIND_ARTIFACT: artifact_revision_steps,
    KIND_PUT_MEMBER: member_put_steps,
    KIND_REMOVE_MEMBER: member_remove_steps,
    KIND_REDACTION: event_redact_steps,
    KIND_EDIT_CHANNEL: channel_update_steps,
    KIND_CREATE_CHANNEL: channel_create_steps,
    KIND_DELETE_CHANNEL: channel_delete_steps,
}
# Stored by the relay's own moves, never accepted from a client (refused before the database).
RELAY_ONLY_KINDS = frozenset({KIND_REMOVAL_MARKER})
RELAY_ONLY_REFUSAL = "restricted: removal markers (45011) are written by the relay only"
ACCEPTED_KINDS = frozenset(STEPS_HANDLERS) | RELAY_ONLY_KINDS


@dataclass(frozen=True, slots=True)
class IngestResult:
    event_id: str
    accepted: bool
    message: str
    # "budget_exceeded" or "database_unavailable" when the database failed the write: the OK
    # message says `error: ...`, and HTTP answers 503 with this code.
    failure: str | None = None

    def as_ok(self) -> list[Any]:
        """The NIP-01 answer: `["OK", <event id>, <accepted>, <message>]`."""
        return ["OK", self.event_id, self.accepted, self.message]


def ingest_event(
    *,
    community: Community,
    raw: bytes | str | dict[str, Any],
    authenticated_pubkeys: Collection[str],
    now: int | None = None,
    parsed: dict[str, Any] | None = None,
) -> IngestResult:
    """Verify, authorize and apply one event for `community`.

    `raw` is the event as received (JSON bytes or text, or an object parsed by
    `nostr.jsonstrict.loads_strict`); `parsed` is the object `raw`'s text was already strictly
    parsed to (the WebSocket's EVENT message), so it is not parsed again. The event is stored
    and served as that text. `authenticated_pubkeys` are those proven by NIP-98 or NIP-42 on
    this request or connection. `now` (Unix seconds) defaults to the current time.
    """
    now = int(time.time()) if now is None else now
    checked = check_event(
        community=community, raw=raw, authenticated_pubkeys=authenticated_pubkeys, now=now,
        parsed=parsed,
    )
    if isinstance(checked, IngestResult):
        return checked
    return apply_event(community_id=community.pk, event=checked, now=now)


def check_event(
    *,
    community: Community,
    raw: bytes | str | dict[str, Any],
    authenticated_pubkeys: Collection[str],
    now: int,
    parsed: dict[str, Any] | None = None,
) -> Event | IngestResult:
    """Everything before the database (`ingest_event`'s arguments): the verified event, or the
    refusal to answer with."""
    try:
        event, digest = parse_event_unverified(raw, now=now, limits=_limits(), parsed=parsed)
        check_storable(event)
        check_content_length(event, community.content_limit())
        check_signature(event, digest)
    except InvalidEvent as exc:
        return IngestResult(_claimed_id(parsed if parsed is not None else raw), False,
                            f"invalid: {exc}")
    if event.pubkey not in authenticated_pubkeys:
        return IngestResult(event.id, False, "restricted: event author is not authenticated")
    kind = event.kind
    if kind not in ACCEPTED_KINDS:
        if kind == KIND_DELETION:
            return IngestResult(
                event.id, False,
                "blocked: kind 5 deletions are not accepted; delete artifacts with op delete",
            )
        return IngestResult(event.id, False, f"blocked: kind {kind} is not accepted here")
    try:
        channel_tag(event)  # every served kind names its channel; refused here, for both drivers
    except WriteRefused as exc:
        return refusal(event.id, exc)
    if kind in RELAY_ONLY_KINDS:
        return IngestResult(event.id, False, RELAY_ONLY_REFUSAL)
    return event


def apply_event(*, community_id: int, event: Event, now: int) -> IngestResult:
    """The write transaction of a checked event (`check_event`), on Django's connection."""
    try:
        with write_transaction(community_id=community_id) as ctx:
            run_write_steps(STEPS_HANDLERS[event.kind](ctx=ctx, event=event, now=now))
    except WriteRefused as exc:
        return refusal(event.id, exc)
    except DatabaseError as exc:
        return database_failure(event.id, exc)
    return IngestResult(event.id, True, "")


def refusal(event_id: str, exc: WriteRefused) -> IngestResult:
    """The answer to a write its rules refused, or to a duplicate (accepted, nothing done)."""
    if isinstance(exc, Duplicate):
        return IngestResult(event_id, True, exc.ok_message)
    return IngestResult(event_id, False, exc.ok_message)


NUL_REFUSAL = (
    "content and tags cannot contain U+0000 (NUL): this relay stores events in PostgreSQL,"
    " whose text and jsonb cannot hold it"
)


def check_storable(event: Event) -> None:
    """Refuse what NIP-01 allows but PostgreSQL cannot hold, before anything is stored.

    The stored event is read back as `raw::jsonb` by plain reads, history and replay (tag
    predicates), and PostgreSQL refuses the escape `\\u0000` there: one such event, once
    accepted, would fail those reads for every reader of the community. Every other character
    JSON can carry (controls, U+2028/2029, non-BMP) round-trips through text and jsonb. Checked
    on the parsed strings, not the bytes, so an escaped backslash before `u0000` is not a NUL.
    """
    if "\x00" in event.content or any("\x00" in value for tag in event.tags for value in tag):
        raise InvalidEvent(NUL_REFUSAL)


def check_content_length(event: Event, limit: int | None) -> None:
    """The community's NIP-11 `limitation.max_content_length`, in characters (None: no limit
    beyond the event size)."""
    if limit is not None and len(event.content) > limit:
        raise InvalidEvent(
            f"content is longer than this community's {limit} characters"
            f" ({len(event.content)})"
        )


def _limits() -> EventLimits:
    # The limits NIP-11 announces are the ones enforced (settings.RELAY_EVENT_LIMITS).
    limits: EventLimits = getattr(settings, "RELAY_EVENT_LIMITS", DEFAULT_LIMITS)
    return limits


def database_failure(event_id: str, exc: DatabaseError | psycopg.Error) -> IngestResult:
    """The answer to a write the database failed (Django's errors, or psycopg's on the
    asyncio driver)."""
    if is_statement_timeout(exc):
        return IngestResult(
            event_id, False, "error: the write ran past its budget; retry later",
            failure="budget_exceeded",
        )
    if isinstance(exc, OperationalError | psycopg.OperationalError):
        logger.warning("database unavailable during ingest: %s", exc)
        return IngestResult(
            event_id, False, "error: the database is unavailable; retry later",
            failure="database_unavailable",
        )
    logger.exception("ingest of %s failed", event_id)
    return IngestResult(event_id, False, "error: the event could not be stored")


def _claimed_id(raw: object) -> str:
    """The id an invalid event claims, for its OK answer ("" when there is none to echo)."""
    if not isinstance(raw, dict):
        try:
            raw = orjson.loads(raw)  # type: ignore[arg-type]
        except (orjson.JSONDecodeError, TypeError):
            return ""
    claimed = raw.get("id") if isinstance(raw, dict) else None
    return claimed if is_lower_hex(claimed, 64) else ""  # type: ignore[return-value]
