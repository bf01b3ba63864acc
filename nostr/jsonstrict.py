"""Strict JSON parsing for untrusted Nostr input.

The relay hashes and stores what clients send, so two parsers must never read one document
differently. ``loads_strict`` therefore refuses what JSON parsers disagree on: duplicate object
keys (RFC 8259 leaves the winner undefined), lone UTF-16 surrogates (not representable in
UTF-8, so no event id can cover them) and the non-standard ``NaN``/``Infinity`` literals.

orjson does the parsing and already rejects invalid UTF-8, lone surrogates (raw or escaped),
``NaN``/``Infinity`` and numbers that overflow to infinity. It silently keeps the last of
duplicate keys, so duplicates are detected afterwards by counting colons (see
``_has_duplicate_keys``), which costs a fraction of a second parse.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = [
    "DUPLICATE_KEY",
    "StrictJSONError",
    "has_duplicate_keys_exact",
    "is_int",
    "loads_keeping_last_duplicate",
    "loads_strict",
    "may_hide_colons",
]


DUPLICATE_KEY = "duplicate key in object"


class StrictJSONError(ValueError):
    """The input is not strict JSON; ``str()`` is a short reason fit for a client."""


def is_int(value: object) -> bool:
    """True for a real integer: ``bool`` is an ``int`` subclass in Python but not a number."""
    return isinstance(value, int) and not isinstance(value, bool)


def loads_strict(raw: bytes | bytearray | memoryview | str) -> Any:
    """Parse one JSON document, rejecting duplicate keys, lone surrogates and NaN/Infinity.

    Integers beyond the 64-bit range come back as floats (orjson's behaviour), so callers that
    require integers reject them through ``is_int``.
    """
    if isinstance(raw, memoryview):
        raw = raw.tobytes()
    parsed = loads_keeping_last_duplicate(raw)
    if isinstance(raw, str):
        # Only reached when every character encodes to UTF-8 (orjson checked), so this is safe.
        raw = raw.encode("utf-8")
    if b"{" in raw and _has_duplicate_keys(raw, parsed):
        raise StrictJSONError(DUPLICATE_KEY)
    return parsed


def loads_keeping_last_duplicate(raw: bytes | bytearray | memoryview | str) -> Any:
    """``loads_strict`` without the duplicate-key check: a repeated key keeps its last value.

    For callers that know the shape of the document and rule duplicates out more cheaply
    themselves (``nostr.events`` does, from the event's canonical serialization); anyone else
    wants ``loads_strict``.
    """
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise StrictJSONError(_short_reason(exc.msg)) from None


def _short_reason(message: str) -> str:
    # orjson's wording for surrogates varies by position ("no low surrogate", "invalid high
    # surrogate", "surrogates not allowed"); clients only need to know what to fix.
    if "surrogate" in message:
        return "lone surrogate in string"
    return message


def _has_duplicate_keys(raw: bytes | bytearray, parsed: Any) -> bool:
    """Whether the document ``parsed`` came from repeats a key inside one object.

    In valid JSON a ``:`` outside strings separates exactly one key/value pair, so
    ``raw.count(":") - colons inside strings`` is the number of pairs written. orjson keeps one
    entry per distinct key, so the document had duplicates exactly when more pairs were written
    than the parsed objects hold. Colons inside strings are counted on the decoded strings,
    which is exact unless a colon was written as the escape ``\\u003a``; then (rare) an exact
    second parse decides.
    """
    written_colons = raw.count(b":")
    pairs, string_colons = _count_pairs_and_string_colons(parsed)
    if written_colons == pairs:
        return False
    if may_hide_colons(raw):
        return has_duplicate_keys_exact(raw)
    return written_colons - string_colons != pairs


def may_hide_colons(raw: bytes | bytearray) -> bool:
    """Whether a colon may be written as the escape ``\\u003a``, so that counting ``:`` bytes
    undercounts the colons inside strings (an escaped backslash before ``u003a`` also matches:
    a false alarm only costs the exact check)."""
    return b"\\u003" in raw


def _count_pairs_and_string_colons(parsed: Any) -> tuple[int, int]:
    # Iterative: orjson accepts nesting up to 1024 levels, deeper than Python's recursion limit.
    pairs = 0
    colons = 0
    stack: list[Any] = [parsed]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is str:
            colons += node.count(":")
        elif kind is list:
            stack.extend(node)
        elif kind is dict:
            pairs += len(node)
            for key in node:
                colons += key.count(":")
            stack.extend(node.values())
    return pairs, colons


class _DuplicateKeyError(Exception):
    pass


def _reject_duplicate_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _DuplicateKeyError
    return obj


def has_duplicate_keys_exact(raw: bytes | bytearray) -> bool:
    """Exact duplicate-key check of a document orjson has already accepted (slow path)."""
    # The stdlib scanner reports every pair to the hook; orjson has already validated the
    # document, so this parse cannot fail for any other reason.
    try:
        json.loads(raw.decode("utf-8"), object_pairs_hook=_reject_duplicate_pairs)
    except _DuplicateKeyError:
        return True
    except RecursionError:
        # orjson allows deeper nesting than the stdlib scanner can follow; refuse rather than
        # accept a document whose keys could not be checked.
        raise StrictJSONError("nesting too deep") from None
    return False
