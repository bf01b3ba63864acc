"""NIP-01 events: canonical ids, every invalid class refused with its reason, helpers."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nostr import schnorr
from nostr.events import (
    EVENT_KEYS,
    EventLimits,
    InvalidEvent,
    check_event_id,
    compute_event_id,
    first_tag,
    has_tag,
    is_canonical_uuid,
    is_lower_hex,
    parse_event,
    parse_event_unverified,
    serialize_event,
    served_event,
    sign,
    sign_event,
    tag_values,
)

SECRET = "7f7ff03d123792d6ac594bfa67bf6d0c0ab55b6b1fdb6249303fe861f1ccba9a"
PUBKEY = schnorr.pubkey_from_secret(SECRET)
NOW = 1_700_000_000
UUID = "1b4e28ba-2fa1-41d2-883f-0016d3cca427"


def _event(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "kind": 45010,
        "tags": [["d", UUID], ["h", UUID], ["title", "A task"]],
        "content": "body",
        "created_at": NOW,
    }
    fields.update(overrides)
    return sign_event(SECRET, **fields)


def _raw(event: dict[str, Any]) -> bytes:
    return orjson.dumps(event)


def _invalid(raw: Any, *, now: int = NOW, limits: EventLimits | None = None) -> str:
    with pytest.raises(InvalidEvent) as caught:
        if limits is None:
            parse_event(raw, now=now)
        else:
            parse_event(raw, now=now, limits=limits)
    return str(caught.value)


def _resigned(event: dict[str, Any]) -> dict[str, Any]:
    """The event with a correct id and signature for whatever its fields now hold."""
    event = dict(event)
    event["id"] = compute_event_id(
        event["pubkey"], event["created_at"], event["kind"], event["tags"], event["content"]
    )
    event["sig"] = schnorr.sign(SECRET, bytes.fromhex(event["id"]))
    return event


# --- canonical id -----------------------------------------------------------------------------

ESCAPE_HEAVY = 'line1\nline2\t"quoted" \\ back\x00\x1f\x7f é 😀 \u2028 \b\f\r </script>'


def test_id_matches_nostr_tools_for_escape_heavy_content() -> None:
    # getEventHash from nostr-tools 2.25.2 on this exact event (tests/interop checks many more).
    tags = [
        ["t", "ü"],
        [
            "e",
            "5c83da77af1dec6d7289834998ad7aafbd9e2191396d75ec3cc27f5a77226f36",
            "wss://relay.example/",
        ],
    ]
    pubkey = "f9308a019258c31049344f85f89d5229b531c845836f99b08601f113bce036f9"
    event_id = compute_event_id(pubkey, 1700000000, 1, tags, ESCAPE_HEAVY)
    assert event_id == "6f293c57692552660fdd7feaa2b0a85bea7410cfee68f086d809db0e5c8b0626"


def test_serialization_escapes_every_code_point_like_json_stringify() -> None:
    # JSON.stringify (nostr-tools) and json.dumps(ensure_ascii=False) agree by specification:
    # short escapes for \b \f \n \r \t, \u00xx for other controls, '"' and '\' escaped, all
    # else verbatim. Check orjson against the stdlib over every non-surrogate code point.
    code_points = [*range(0xD800), *range(0xE000, 0x110000)]
    for start in range(0, len(code_points), 4096):
        text = "".join(map(chr, code_points[start : start + 4096]))
        expected = json.dumps(
            [0, "p", 1, 2, [["t", text]], text], separators=(",", ":"), ensure_ascii=False
        ).encode()
        assert serialize_event("p", 1, 2, [["t", text]], text) == expected


def test_serialization_refuses_what_json_cannot_carry() -> None:
    with pytest.raises(ValueError):
        serialize_event(PUBKEY, NOW, 1, [], "\ud800")
    with pytest.raises(ValueError):
        compute_event_id(PUBKEY, 2**64, 1, [], "")


# --- accepted events --------------------------------------------------------------------------


def test_signed_event_parses_from_every_input_form() -> None:
    event = _event(content=ESCAPE_HEAVY)
    raw = _raw(event)
    for form in (raw, raw.decode(), bytearray(raw), memoryview(raw), dict(event)):
        assert parse_event(form, now=NOW).to_dict() == event


def test_created_at_window_bounds_are_inclusive() -> None:
    limits = EventLimits()
    parse_event(_raw(_event(created_at=NOW + limits.created_at_upper)), now=NOW)
    parse_event(_raw(_event(created_at=NOW - limits.created_at_lower)), now=NOW)


def test_size_limits_are_inclusive() -> None:
    limits = EventLimits(max_tag_value_bytes=4096)
    parse_event(_raw(_event(tags=[["t", "x" * 4096]])), now=NOW, limits=limits)
    parse_event(_raw(_event(tags=[["t", "😀" * 1024]])), now=NOW, limits=limits)  # 4096 bytes
    parse_event(_raw(_event(tags=[["t"]] * 256)), now=NOW)
    event = _event(content="")
    padding = 65536 - len(_raw(event))
    exact = _raw(_event(content="x" * padding))
    assert len(exact) == 65536
    parse_event(exact, now=NOW)


def test_whitespace_and_key_order_do_not_matter() -> None:
    event = _event()
    text = json.dumps(dict(reversed(list(event.items()))), indent=2, ensure_ascii=True)
    assert parse_event(text, now=NOW).to_dict() == event


def test_unverified_parse_returns_the_binary_id() -> None:
    event = _event()
    parsed, event_id = parse_event_unverified(_raw(event), now=NOW)
    assert parsed.to_dict() == event
    assert event_id.hex() == event["id"]


# --- refused events: one test per class, each with its reason ---------------------------------


def test_wrong_id_is_refused() -> None:
    event = _event()
    event["id"] = "0" * 64
    assert _invalid(_raw(event)) == "bad event id"


def test_content_changed_after_signing_is_refused() -> None:
    event = _event()
    event["content"] = "other"
    assert _invalid(_raw(event)) == "bad event id"


def test_bad_signature_is_refused() -> None:
    event = _event()
    other = _event(content="other")
    event["sig"] = other["sig"]
    assert _invalid(_raw(event)) == "bad signature"


def test_signature_by_another_key_is_refused() -> None:
    event = _event()
    event["pubkey"] = schnorr.pubkey_from_secret(f"{3:064x}")
    assert _invalid(_raw(_resigned(event))) == "bad signature"


def test_pubkey_off_the_curve_is_refused() -> None:
    event = dict(_event(), pubkey="f" * 64)
    event["id"] = compute_event_id(
        event["pubkey"], event["created_at"], event["kind"], event["tags"], event["content"]
    )
    assert _invalid(_raw(event)) == "bad signature"


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("created_at", True, "created_at must be an integer"),
        ("created_at", float(NOW), "created_at must be an integer"),
        ("created_at", str(NOW), "created_at must be an integer"),
        ("created_at", None, "created_at must be an integer"),
        ("kind", 1.0, "kind must be an integer"),
        ("kind", False, "kind must be an integer"),
        ("kind", "1", "kind must be an integer"),
        ("kind", -1, "kind must be between 0 and 65535"),
        ("kind", 65536, "kind must be between 0 and 65535"),
        ("content", 1, "content must be a string"),
        ("content", None, "content must be a string"),
        ("tags", {}, "tags must be a list"),
        ("tags", "d", "tags must be a list"),
        ("tags", [[]], "each tag must be a non-empty list of strings"),
        ("tags", ["d"], "each tag must be a non-empty list of strings"),
        ("tags", [["d", 1]], "each tag must be a non-empty list of strings"),
        ("tags", [["d", None]], "each tag must be a non-empty list of strings"),
        ("tags", [["d", ["x"]]], "each tag must be a non-empty list of strings"),
    ],
)
def test_wrong_types_are_refused(field: str, value: Any, reason: str) -> None:
    event = dict(_event(), **{field: value})
    assert _invalid(_raw(event)) == reason
    assert _invalid(event) == reason


def test_float_kind_in_json_text_is_refused() -> None:
    text = _raw(_event()).decode().replace('"kind":45010', '"kind":45010.0')
    assert _invalid(text) == "kind must be an integer"
    text = _raw(_event()).decode().replace('"kind":45010', '"kind":4.501e4')
    assert _invalid(text) == "kind must be an integer"


def test_created_at_true_in_json_text_is_refused() -> None:
    text = _raw(_event()).decode().replace(f'"created_at":{NOW}', '"created_at":true')
    assert _invalid(text) == "created_at must be an integer"


@pytest.mark.parametrize(
    ("field", "reason"),
    [
        ("id", "id must be 64 lowercase hex characters"),
        ("pubkey", "pubkey must be 64 lowercase hex characters"),
        ("sig", "sig must be 128 lowercase hex characters"),
    ],
)
def test_uppercase_hex_is_refused(field: str, reason: str) -> None:
    event = _event()
    event[field] = event[field].upper()
    assert _invalid(_raw(event)) == reason


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("id", "ab"),
        ("id", "g" * 64),
        ("id", "a" * 63 + "\n"),
        ("id", 5),
        ("pubkey", "a" * 65),
        ("pubkey", None),
        ("sig", "a" * 64),
    ],
)
def test_malformed_hex_is_refused(field: str, value: Any) -> None:
    event = dict(_event(), **{field: value})
    assert f"{field} must be" in _invalid(_raw(event))


def test_oversized_event_is_refused_before_parsing() -> None:
    event = _event(content="x" * 65536)
    raw = _raw(event)
    assert _invalid(raw).startswith("event too large")
    assert _invalid(raw.decode()).startswith("event too large")
    assert _invalid(event).startswith("event too large")
    assert _invalid(b"[" * 70000).startswith("event too large")


def test_event_one_byte_over_the_limit_is_refused() -> None:
    event = _event(content="")
    over = _raw(_event(content="x" * (65537 - len(_raw(event)))))
    assert len(over) == 65537
    assert _invalid(over) == "event too large (65537 bytes, max 65536)"


def test_too_many_tags_are_refused() -> None:
    assert _invalid(_raw(_event(tags=[["t", "x"]] * 257))) == "too many tags (257, max 256)"


@pytest.mark.parametrize("value", ["x" * 4097, "😀" * 1024 + "x", "é" * 2049])
def test_oversized_tag_value_is_refused(value: str) -> None:
    assert _invalid(_raw(_event(tags=[["t", value]]))) == "tag value too large (max 4096 bytes)"


def test_oversized_tag_name_is_refused() -> None:
    assert _invalid(_raw(_event(tags=[["x" * 5000]]))) == "tag value too large (max 4096 bytes)"


def test_far_future_created_at_is_refused() -> None:
    assert _invalid(_raw(_event(created_at=NOW + 901))) == "created_at too far in the future"


def test_too_old_created_at_is_refused() -> None:
    assert _invalid(_raw(_event(created_at=NOW - 31536001))) == "created_at too old"


def test_limits_are_configurable() -> None:
    limits = EventLimits(max_tags=1, created_at_upper=0)
    assert _invalid(_raw(_event(tags=[["a"], ["b"]])), limits=limits).startswith("too many tags")
    assert _invalid(_raw(_event(created_at=NOW + 1, tags=[])), limits=limits).endswith("future")


def test_duplicate_keys_are_refused() -> None:
    event = _event()
    text = _raw(event).decode()
    duplicated = text[:-1] + f',"content":{json.dumps(event["content"])}}}'
    assert _invalid(duplicated) == "malformed JSON: duplicate key in object"
    # The duplicate carrying another value must not be able to slip a different content in.
    swapped = text[:-1] + ',"content":"evil"}'
    assert _invalid(swapped) == "malformed JSON: duplicate key in object"
    # Whitespace and escapes take the counting path instead of the length comparison.
    pretty = json.dumps(event, indent=1, ensure_ascii=True)
    assert _invalid(pretty[:-1] + ',"kind":1}') == "malformed JSON: duplicate key in object"
    assert parse_event(pretty, now=NOW).to_dict() == event


def test_lone_surrogates_are_refused() -> None:
    text = _raw(_event(content="ab")).decode().replace('"content":"ab"', '"content":"a\\ud800b"')
    assert _invalid(text) == "malformed JSON: lone surrogate in string"
    assert _invalid(text.replace("\\ud800", "\ud800")) == "lone surrogate in string"
    event = dict(_event(), content="\udc00")
    assert "lone surrogate" in _invalid(event)


@pytest.mark.parametrize("extra", [{"extra": 1}, {"relays": []}, {"seenOn": None}])
def test_extra_keys_are_refused(extra: dict[str, Any]) -> None:
    event = dict(_event(), **extra)
    (name,) = extra
    assert _invalid(_raw(event)) == f"unexpected field {name}"


def test_unprintable_extra_key_is_not_echoed() -> None:
    event = dict(_event(), **{"<script>": 1})
    assert _invalid(_raw(event)) == "unexpected field"


@pytest.mark.parametrize("field", ["id", "pubkey", "created_at", "kind", "tags", "content", "sig"])
def test_missing_fields_are_refused(field: str) -> None:
    event = _event()
    del event[field]
    assert _invalid(_raw(event)) == f"missing field {field}"


@pytest.mark.parametrize("raw", [b"[]", b"1", b'"event"', b"null", b'["EVENT", {}]'])
def test_non_objects_are_refused(raw: bytes) -> None:
    assert _invalid(raw) == "event must be a JSON object"


@pytest.mark.parametrize("raw", [b"", b"{", b"{'id': 1}", b"\xff", b'{"id": NaN}'])
def test_malformed_json_is_refused(raw: bytes) -> None:
    assert _invalid(raw).startswith("malformed JSON: ")


def test_unserializable_dict_is_refused() -> None:
    assert "not valid JSON" in _invalid(dict(_event(), tags=[("t", b"bytes")]))


# --- helpers ----------------------------------------------------------------------------------


def test_tag_helpers() -> None:
    tags = [["h", "a"], ["private"], ["h", "b", "x"], ["p", "k", "admin"]]
    event = parse_event(_raw(_event(tags=tags)), now=NOW)
    assert tag_values(event, "h") == ["a", "b"]
    assert tag_values(event, "private") == []
    assert tag_values(event, "e") == []
    assert first_tag(event, "h") == "a"
    assert first_tag(event, "private") is None
    assert first_tag(event, "e") is None
    assert has_tag(event, "private")
    assert not has_tag(event, "public")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (UUID, True),
        ("00000000-0000-0000-0000-000000000000", True),
        (UUID.upper(), False),
        (UUID.replace("-", ""), False),
        ("{" + UUID + "}", False),
        ("urn:uuid:" + UUID, False),
        (UUID + "\n", False),
        (" " + UUID, False),
        (UUID[:-1] + "g", False),
        (None, False),
        (123, False),
    ],
)
def test_is_canonical_uuid(value: Any, expected: bool) -> None:
    assert is_canonical_uuid(value) is expected


def test_is_lower_hex() -> None:
    assert is_lower_hex("0123456789abcdef", 16)
    assert not is_lower_hex("0123456789ABCDEF", 16)
    assert not is_lower_hex("0123456789abcdef", 15)
    assert not is_lower_hex("0123456789abcde\n", 16)
    assert not is_lower_hex(b"00", 2)
    assert is_lower_hex("", 0)


def test_sign_event_defaults_created_at_to_now() -> None:
    event = sign_event(SECRET, kind=1, tags=(("t", "x"),), content="hi")
    assert event["tags"] == [["t", "x"]]
    parse_event(event, now=event["created_at"])
    assert list(event) == ["id", "pubkey", "created_at", "kind", "tags", "content", "sig"]


# --- properties -------------------------------------------------------------------------------

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
_tags = st.lists(st.lists(_text, min_size=1, max_size=4), max_size=6)


@settings(max_examples=100, deadline=None)
@given(kind=st.integers(0, 65535), tags=_tags, content=_text, age=st.integers(-900, 31536000))
def test_every_signed_event_parses_back(
    kind: int, tags: list[list[str]], content: str, age: int
) -> None:
    event = _event(kind=kind, tags=tags, content=content, created_at=NOW - age)
    assert parse_event(_raw(event), now=NOW).to_dict() == event
    assert parse_event(json.dumps(event, ensure_ascii=True), now=NOW).to_dict() == event


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_text, children, max_size=3),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(
    field=st.sampled_from(["id", "pubkey", "created_at", "kind", "tags", "content", "sig"]),
    value=_json_values,
)
def test_any_field_replaced_by_any_value_raises_only_invalid_event(field: str, value: Any) -> None:
    event = dict(_event(), **{field: value})
    for form in (event, _raw_or_none(event)):
        if form is None:
            continue
        with contextlib.suppress(InvalidEvent):
            parse_event(form, now=NOW)


def _raw_or_none(event: dict[str, Any]) -> bytes | None:
    try:
        return orjson.dumps(event)
    except orjson.JSONEncodeError:  # NaN is not JSON at all; big ints exceed orjson
        return None


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=200) | _text | st.dictionaries(_text, _json_values, max_size=8))
def test_arbitrary_input_raises_only_invalid_event(raw: Any) -> None:
    with contextlib.suppress(InvalidEvent):
        parse_event(raw, now=NOW)


@settings(max_examples=300, deadline=None)
@given(
    content=st.text(alphabet=st.sampled_from(':a"\\é'), max_size=12),
    tag_value=st.text(alphabet=st.sampled_from(":b"), max_size=6),
    duplicate=st.none() | st.sampled_from(sorted(EVENT_KEYS)),
    escape_colons=st.booleans(),
    ascii_only=st.booleans(),
    spaced=st.booleans(),
)
def test_duplicate_keys_are_found_exactly_in_events(
    content: str,
    tag_value: str,
    duplicate: str | None,
    escape_colons: bool,
    ascii_only: bool,
    spaced: bool,
) -> None:
    event = _event(content=content, tags=[["t", tag_value], ["u", "https://x.example:1/"]])
    pairs = list(event.items())
    if duplicate is not None:
        pairs.insert(0, (duplicate, event[duplicate]))  # the same value again, written first

    def string(value: str) -> str:
        out = json.dumps(value, ensure_ascii=ascii_only)
        return out.replace(":", "\\u003a") if escape_colons else out

    def render(value: Any) -> str:
        if isinstance(value, str):
            return string(value)
        if isinstance(value, list):
            return "[" + ",".join(render(item) for item in value) + "]"
        return json.dumps(value)

    colon = ": " if spaced else ":"
    text = "{" + ",".join(f"{string(key)}{colon}{render(value)}" for key, value in pairs) + "}"
    if duplicate is None:
        assert parse_event(text, now=NOW).to_dict() == event
    else:
        assert _invalid(text) == "malformed JSON: duplicate key in object"


# --- the Event type ---------------------------------------------------------------------------


def test_the_event_keeps_its_text_exactly_as_received() -> None:
    """What the relay stores and serves is the client's text, not a re-encoding of it."""
    event = _event(content=ESCAPE_HEAVY, tags=[["t", "\u2028"]])
    pretty = json.dumps(event, indent=2, ensure_ascii=True)
    assert parse_event(pretty, now=NOW).raw == pretty
    assert parse_event(pretty.encode(), now=NOW).raw == pretty
    assert parse_event(bytearray(pretty.encode()), now=NOW).raw == pretty
    parsed_once = orjson.loads(pretty)
    assert parse_event(pretty, now=NOW, parsed=parsed_once).raw == pretty
    # An object (no text) keeps its compact JSON.
    assert parse_event(dict(event), now=NOW).raw == orjson.dumps(event).decode()
    assert parse_event(pretty, now=NOW).tags == (("t", "\u2028"),)


def test_an_already_parsed_object_gets_every_check_but_the_parse() -> None:
    event = _event()
    text = orjson.dumps(dict(event, content="altered")).decode()
    with pytest.raises(InvalidEvent, match="bad event id"):
        parse_event(text, now=NOW, parsed=orjson.loads(text))
    big = orjson.dumps(_event(content="x" * 70000)).decode()
    with pytest.raises(InvalidEvent, match="too large"):
        parse_event(big, now=NOW, parsed=orjson.loads(big))


def test_sign_returns_the_event_whose_text_parses_back_to_it() -> None:
    event = sign(SECRET, kind=1, tags=[["t", "x"]], content="hi", created_at=NOW)
    assert parse_event(event.raw, now=NOW) == event
    assert sign_event(SECRET, kind=1, tags=[["t", "x"]], content="hi", created_at=NOW)[
        "tags"
    ] == [["t", "x"]]


def test_served_event_checks_fields_but_not_time_and_leaves_id_to_check_event_id() -> None:
    old = _event(created_at=1)
    event = served_event(old)
    assert event.to_dict() == old and check_event_id(event) == bytes.fromhex(old["id"])
    with pytest.raises(InvalidEvent, match="bad event id"):
        check_event_id(served_event(dict(old, content="altered")))
    with pytest.raises(InvalidEvent, match="missing field sig"):
        served_event({k: v for k, v in old.items() if k != "sig"})
