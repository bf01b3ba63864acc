"""Progress tokens: the opaque, authenticated state a client carries between pages and rounds.

Layout (before base64url without padding):

    version (1 byte) | nonce (12) | AES-GCM-SIV ciphertext of the fields + tag (16)

The fields: the fixed part (`_FIELDS`), the cursor key, then the view part (`_VIEW`). The view
part carries a reference to the view's channel set V, never V itself (PROTOCOL.md section 5,
"View"; docs/protocol.md, "Wide views"): the community's listing version the view was computed
under, and the personal part of V, the private channels P could read then (at most
`MAX_PRIVATE_CHANNELS`; more are not carried, and a change that needs them resets). V is then
every channel open at that listing version plus those: `artifacts.selectors.reader_view`
recovers it, for the channels that changed since, from the listing change log. Then the round's
catch-up set C (at most `MAX_CATCHUP_CHANNELS` channel ids; a catch-up that grows past it
resets) and the catch-up's cursor. So a token's size does not grow with V: the largest is under
1,000 characters.

The key is HKDF-SHA256 of the relay key (per token version), so every instance sharing the relay
key reads every other's tokens and nothing inside is readable by the client. The associated data
binds the version byte, the community, the reader and the canonical filter: a token presented by
another reader, to another community or with another filter fails authentication exactly like a
tampered one. AES-GCM-SIV rather than AES-GCM because nonces are random and a page issues a token
every time: a repeated nonce under GCM-SIV reveals only that two tokens are equal.

Decoding answers one of three things: the token (current key, current version); `RetiredToken`
(authentic under a retired key or an older version: the caller starts a new full round); or
`InvalidProgress` (400 `invalid_progress`) for everything else.
"""

from __future__ import annotations

import base64
import hashlib
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from functools import lru_cache
from os import urandom
from typing import NamedTuple

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCMSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

# 2: the fixed part carries the round's and the previous round's first-page snapshot xmin, and
# the view part a reference to V (listing version, private channels), not V.
TOKEN_VERSION = 2
_NONCE_BYTES = 12
_TAG_BYTES = 16
# Fields: phase, epoch, database, round T, watermark W, cursor time, view digest, view T,
# view fingerprint, issued at, round xmin, previous round xmin, cursor key length; then the
# cursor key itself.
_FIELDS = struct.Struct(">Bq8sqqq16sq8sqQQB")
_MAX_CURSOR_KEY = 32
# The view part: flags (bit 0: the private channels are carried; bit 1: the catch-up is
# pending; bits 2 and 3: the private channels, the catch-up set, are stored: a 16-byte digest
# stands for them), the listing version the view was computed under, the numbers of private
# channels and of catch-up channels carried inline, when the stored sets were last refreshed;
# then those channels (16 bytes each, sorted) or digests, and the catch-up cursor's length and
# bytes.
_VIEW = struct.Struct(">BqBBq")
_CARRIES_PRIVATE = 1
_CATCHUP_PENDING = 2
_PRIVATE_STORED = 4
_CATCHUP_STORED = 8
_FLAGS = _CARRIES_PRIVATE | _CATCHUP_PENDING | _PRIVATE_STORED | _CATCHUP_STORED
# Bounds on the sets a token carries: the largest token stays under 1,000 characters.
MAX_PRIVATE_CHANNELS = 20
MAX_CATCHUP_CHANNELS = 12
_CHANNEL_BYTES = 16
# The catch-up cursor: the channel being walked (16 bytes: from its start) and the last artifact
# it passed there (32 bytes in all); empty: from the start of the first channel.
_CATCHUP_CURSOR_LENGTHS = (0, 16, 32)
# The largest token is under 1,000 characters; anything much longer is not one of ours.
_MAX_TOKEN_CHARS = 2048
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")
_ORIGIN = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


class InvalidProgress(ValueError):
    """Malformed, unauthentic, or another reader's, community's or filter's token (HTTP 400)."""


class Phase(IntEnum):
    # A full round: readable heads with modified_at < T, cursor on (modified_at, artifact_id).
    FULL = 0
    # A continuation round over changed heads in [W - overlap, T), same cursor.
    HEADS = 1
    # ... then over moves in [W - overlap, T), cursor on (modified_at, event_id).
    MOVES = 2
    # The round is finished; the next page starts a continuation round with W = T.
    DONE = 3


class ProgressToken(NamedTuple):
    """A token's state, immutable. A named tuple rather than a frozen dataclass: a page builds
    one when it decodes and changes a few fields of it twice (`_replace`), and with 21 fields
    that was 10-15 us a page as a dataclass (`dataclasses.replace` loops over the fields in
    Python; a named tuple's `_replace` maps over the tuple in C). Read by name only."""

    phase: Phase
    epoch: int
    # sha256 of the database identity (artifacts.selectors.sync_epoch.database_identity), first
    # 8 bytes.
    database: bytes
    round_t: datetime
    # The round's watermark W (continuation rounds); the epoch start for full rounds.
    watermark: datetime
    cursor_at: datetime
    cursor_key: bytes
    # The reader's view as the page that computed it saw it, the fence T of that page's round,
    # and the fingerprint of what could change it (see artifacts.selectors.reader_view).
    view_digest: bytes
    view_t: datetime
    view_fingerprint: bytes
    issued_at: datetime
    # The community's listing version in the snapshot of the page that computed the view.
    listing_version: int = 0
    # The private channels P could read then, within the filter (sorted 16-byte ids): with the
    # listing version, the reference from which V is recovered; None when there were more than
    # MAX_PRIVATE_CHANNELS (a change of one of them then resets).
    view_private: tuple[bytes, ...] | None = ()
    # The round's catch-up (PROTOCOL.md section 5): the set C, whether it still has heads to
    # deliver, and its cursor (the channel walked, then the last artifact passed in it: 0, 16
    # or 32 bytes).
    catchup: frozenset[bytes] = frozenset()
    catchup_pending: bool = False
    catchup_cursor: bytes = b""
    # Re-read, not re-sent (PROTOCOL.md section 5): the snapshot xmin (xid8) of this round's
    # first page, and of the previous round's first page (0: unknown, the round sends every
    # candidate). A row version whose xmin is below the latter was visible to that page.
    round_xmin: int = 0
    previous_xmin: int = 0
    # The digests of the stored sets standing for the private channels and for the catch-up set
    # (b"": carried inline), and when their rows were last refreshed.
    private_ref: bytes = b""
    catchup_ref: bytes = b""
    stored_at: datetime = _ORIGIN


@dataclass(frozen=True, slots=True)
class RetiredToken:
    """Authentic, but under a retired relay key or an older token version: start over."""

    reason: str


@lru_cache(maxsize=16)
def database_tag(identity: str) -> bytes:
    """Cached: every page asks, and a process serves one database (a few after failovers)."""
    return hashlib.sha256(identity.encode()).digest()[:8]


def token_binding(*, community_id: int, reader: str, filter_digest: bytes) -> bytes:
    """What a token is bound to (the AEAD's associated data besides the version)."""
    return hashlib.sha256(
        b"buzz token binding\0%d\0%s\0" % (community_id, reader.encode()) + filter_digest
    ).digest()


@lru_cache(maxsize=16)
def _key(secret_hex: str, version: int) -> AESGCMSIV:
    key = HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=b"buzz-relay",
        info=b"progress-token/v%d" % version,
    ).derive(bytes.fromhex(secret_hex))
    return AESGCMSIV(key)


def _micros(moment: datetime) -> int:
    return (moment - _ORIGIN) // _MICROSECOND


def _moment(micros: int) -> datetime:
    # Positional: timedelta's keyword parsing was a third of this, six times a page.
    return _ORIGIN + timedelta(0, 0, micros)


def encode_progress(
    token: ProgressToken,
    *,
    binding: bytes,
    secret: str | None = None,
    version: int = TOKEN_VERSION,
) -> str:
    """The token string for `token`. `secret` and `version` default to the relay's current ones
    (tests pass others to make tokens of a retired key or an older version)."""
    if len(token.cursor_key) > _MAX_CURSOR_KEY:
        raise ValueError("cursor key too long")
    view = _pack_view(token)
    fields = _FIELDS.pack(
        token.phase,
        token.epoch,
        token.database,
        _micros(token.round_t),
        _micros(token.watermark),
        _micros(token.cursor_at),
        token.view_digest,
        _micros(token.view_t),
        token.view_fingerprint,
        _micros(token.issued_at),
        token.round_xmin,
        token.previous_xmin,
        len(token.cursor_key),
    )
    header = bytes([version])
    nonce = urandom(_NONCE_BYTES)
    sealed = _key(secret or settings.RELAY_SIGNING_SECRET, version).encrypt(
        nonce, fields + token.cursor_key + view, header + binding
    )
    return base64.urlsafe_b64encode(header + nonce + sealed).rstrip(b"=").decode("ascii")


def decode_progress(
    text: str,
    *,
    binding: bytes,
    secret: str | None = None,
    previous_secrets: Sequence[str] | None = None,
    current_version: int = TOKEN_VERSION,
) -> ProgressToken | RetiredToken:
    """Read a token string; raises `InvalidProgress` for anything not authentic for `binding`."""
    raw = _unbase64(text)
    if len(raw) < 1 + _NONCE_BYTES + _TAG_BYTES + _FIELDS.size:
        raise InvalidProgress("token too short")
    version = raw[0]
    if not 1 <= version <= current_version:
        raise InvalidProgress("unknown token version")
    nonce, sealed = raw[1 : 1 + _NONCE_BYTES], raw[1 + _NONCE_BYTES :]
    associated = raw[:1] + binding
    current = secret or settings.RELAY_SIGNING_SECRET
    retired = (
        settings.RELAY_PREVIOUS_SIGNING_SECRETS if previous_secrets is None else previous_secrets
    )
    for index, key_hex in enumerate((current, *retired)):
        try:
            plain = _key(key_hex, version).decrypt(nonce, sealed, associated)
        except InvalidTag:
            continue
        if index > 0:
            return RetiredToken("retired relay key")
        if version < current_version:
            return RetiredToken("older token version")
        return _unpack(plain)
    raise InvalidProgress("token not recognised")


def _unbase64(text: str) -> bytes:
    if not isinstance(text, str) or not 0 < len(text) <= _MAX_TOKEN_CHARS:
        raise InvalidProgress("malformed token")
    if not _BASE64URL.fullmatch(text) or len(text) % 4 == 1:
        raise InvalidProgress("malformed token")
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    # Unused low bits of the last character would let two strings name one token: refuse them,
    # so any changed character is a changed token.
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != text:
        raise InvalidProgress("malformed token")
    return raw


def _unpack(plain: bytes) -> ProgressToken:
    try:
        (
            phase, epoch, database, round_t, watermark, cursor_at, view_digest, view_t,
            fingerprint, issued_at, round_xmin, previous_xmin, key_length,
        ) = _FIELDS.unpack_from(plain)
        cursor_key = plain[_FIELDS.size : _FIELDS.size + key_length]
        if len(cursor_key) != key_length:
            raise InvalidProgress("malformed token")
        view = _unpack_view(plain[_FIELDS.size + key_length :])
        return ProgressToken(
            phase=Phase(phase),
            epoch=epoch,
            database=database,
            round_t=_moment(round_t),
            watermark=_moment(watermark),
            cursor_at=_moment(cursor_at),
            cursor_key=cursor_key,
            view_digest=view_digest,
            view_t=_moment(view_t),
            view_fingerprint=fingerprint,
            issued_at=_moment(issued_at),
            listing_version=view.listing,
            view_private=view.private,
            catchup=view.catchup,
            catchup_pending=view.pending,
            catchup_cursor=view.cursor,
            private_ref=view.private_ref,
            catchup_ref=view.catchup_ref,
            stored_at=view.stored_at,
            round_xmin=round_xmin,
            previous_xmin=previous_xmin,
        )
    except (struct.error, ValueError, OverflowError) as exc:
        # Authentic but unreadable can only be a bug of ours; the client still gets a 400.
        raise InvalidProgress("malformed token") from exc


def _pack_view(token: ProgressToken) -> bytes:
    private = token.view_private
    catchup = sorted(token.catchup)
    if private is not None and (
        len(private) > MAX_PRIVATE_CHANNELS or list(private) != sorted(set(private))
    ):
        raise ValueError("a token carries at most MAX_PRIVATE_CHANNELS sorted, distinct channels")
    if len(catchup) > MAX_CATCHUP_CHANNELS:
        raise ValueError("a token carries at most MAX_CATCHUP_CHANNELS catch-up channels")
    if any(len(channel) != _CHANNEL_BYTES for channel in (*(private or ()), *catchup)):
        raise ValueError("channel ids are 16 bytes")
    if len(token.catchup_cursor) not in _CATCHUP_CURSOR_LENGTHS:
        raise ValueError("bad catch-up cursor")
    for ref, inline in ((token.private_ref, private), (token.catchup_ref, catchup)):
        if ref and (len(ref) != _CHANNEL_BYTES or inline):
            raise ValueError("a stored set is named by its 16-byte digest alone")
    if token.private_ref and private is None:
        raise ValueError("stored private channels are carried")
    flags = (
        (_CARRIES_PRIVATE if private is not None else 0)
        | (_CATCHUP_PENDING if token.catchup_pending else 0)
        | (_PRIVATE_STORED if token.private_ref else 0)
        | (_CATCHUP_STORED if token.catchup_ref else 0)
    )
    return (
        _VIEW.pack(flags, token.listing_version, len(private or ()), len(catchup),
                   _micros(token.stored_at))
        + token.private_ref + b"".join(private or ())
        + token.catchup_ref + b"".join(catchup)
        + bytes([len(token.catchup_cursor)]) + token.catchup_cursor
    )


class _ViewPart(NamedTuple):
    listing: int
    private: tuple[bytes, ...] | None
    catchup: frozenset[bytes]
    pending: bool
    cursor: bytes
    private_ref: bytes
    catchup_ref: bytes
    stored_at: datetime


def _unpack_view(rest: bytes) -> _ViewPart:
    flags, listing, n_private, n_catchup, stored_at = _VIEW.unpack_from(rest)
    private_ref_bytes = _CHANNEL_BYTES if flags & _PRIVATE_STORED else 0
    catchup_ref_bytes = _CHANNEL_BYTES if flags & _CATCHUP_STORED else 0
    if (
        flags & ~_FLAGS
        or n_private > MAX_PRIVATE_CHANNELS
        or n_catchup > MAX_CATCHUP_CHANNELS
        or (n_private and not flags & _CARRIES_PRIVATE)
        or (private_ref_bytes and (n_private or not flags & _CARRIES_PRIVATE))
        or (catchup_ref_bytes and n_catchup)
    ):
        raise InvalidProgress("malformed token")
    at = _VIEW.size
    private_ref = rest[at : at + private_ref_bytes]
    at += private_ref_bytes
    private = _ids(rest, at, n_private)
    at += n_private * _CHANNEL_BYTES
    catchup_ref = rest[at : at + catchup_ref_bytes]
    at += catchup_ref_bytes
    catchup = _ids(rest, at, n_catchup)
    at += n_catchup * _CHANNEL_BYTES
    cursor_length = rest[at] if at < len(rest) else -1
    cursor = rest[at + 1 :]
    if (
        any(len(channel) != _CHANNEL_BYTES for channel in (*private, *catchup))
        or len(private_ref) != private_ref_bytes
        or len(catchup_ref) != catchup_ref_bytes
        or len(cursor) != cursor_length
        or cursor_length not in _CATCHUP_CURSOR_LENGTHS
        or private != sorted(set(private))
        or catchup != sorted(set(catchup))
    ):
        raise InvalidProgress("malformed token")
    return _ViewPart(
        listing=listing,
        private=tuple(private) if flags & _CARRIES_PRIVATE else None,
        catchup=frozenset(catchup),
        pending=bool(flags & _CATCHUP_PENDING),
        cursor=cursor,
        private_ref=private_ref,
        catchup_ref=catchup_ref,
        stored_at=_moment(stored_at),
    )


def _ids(raw: bytes, at: int, count: int) -> list[bytes]:
    return [raw[at + i * _CHANNEL_BYTES : at + (i + 1) * _CHANNEL_BYTES] for i in range(count)]
