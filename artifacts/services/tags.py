"""Reading the tags of relay-managed events (PROTOCOL.md section 2).

Every check raises `Invalid` with a reason a client can act on.
"""

from __future__ import annotations

from uuid import UUID

from artifacts.services.errors import Invalid
from nostr.events import DuplicateTag, Event, Tag, is_canonical_uuid, is_lower_hex, single_tag

NIL_UUID = "00000000-0000-0000-0000-000000000000"


def checked_tag(event: Event, name: str, *, required: bool = True) -> Tag | None:
    """The one tag called `name`, with a value (None when absent and not required)."""
    try:
        tag = single_tag(event, name)
    except DuplicateTag as exc:
        raise Invalid(str(exc)) from None
    if tag is None:
        if required:
            raise Invalid(f"missing {name} tag")
        return None
    if len(tag) < 2:
        raise Invalid(f"{name} tag has no value")
    return tag


def uuid_value(value: str, name: str) -> UUID:
    if not is_canonical_uuid(value) or value == NIL_UUID:
        raise Invalid(f"{name} must be a canonical lowercase UUID (and not nil)")
    return UUID(value)


def channel_tag(event: Event) -> UUID:
    """The `h` tag every relay-managed kind carries: the channel the event belongs to."""
    tag = checked_tag(event, "h")
    assert tag is not None
    return uuid_value(tag[1], "h")


def pubkey_value(value: str, name: str) -> str:
    if not is_lower_hex(value, 64):
        raise Invalid(f"{name} must be a 64-character lowercase hex pubkey")
    return value


def event_id_value(value: str, name: str) -> str:
    if not is_lower_hex(value, 64):
        raise Invalid(f"{name} must be a 64-character lowercase hex event id")
    return value


def text_value(value: str, name: str, *, max_chars: int) -> str:
    """A short display text stored in a column: non-blank, bounded, no NUL (PostgreSQL text)."""
    if not value.strip():
        raise Invalid(f"{name} must not be blank")
    if len(value) > max_chars:
        raise Invalid(f"{name} is longer than {max_chars} characters")
    if "\x00" in value:
        raise Invalid(f"{name} contains a NUL character")
    return value


def visibility_flag(event: Event) -> str | None:
    """`["public"]` -> open, `["private"]` -> private, neither -> None; both is invalid."""
    names = {tag[0] for tag in event.tags}
    public, private = "public" in names, "private" in names
    if public and private:
        raise Invalid("both public and private tags")
    if private:
        return "private"
    if public:
        return "open"
    return None
