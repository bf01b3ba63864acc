"""Progress tokens: authenticated, bound, compact; anything else is `InvalidProgress`."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from artifacts.tokens import (
    MAX_CATCHUP_CHANNELS,
    MAX_PRIVATE_CHANNELS,
    InvalidProgress,
    Phase,
    ProgressToken,
    RetiredToken,
    database_tag,
    decode_progress,
    encode_progress,
    token_binding,
)

KEY = "11" * 32
OLD_KEY = "22" * 32
OTHER_KEY = "33" * 32
NOW = datetime(2026, 11, 3, 12, 0, 0, 123456, tzinfo=UTC)
BINDING = token_binding(community_id=7, reader="ab" * 32, filter_digest=b"f" * 32)

TOKEN = ProgressToken(
    phase=Phase.MOVES,
    epoch=3,
    database=database_tag("7713803408850307179/16384"),
    round_t=NOW,
    watermark=NOW - timedelta(minutes=5),
    cursor_at=NOW - timedelta(seconds=7),
    cursor_key=bytes(range(32)),
    view_digest=b"v" * 16,
    view_t=NOW - timedelta(minutes=5),
    view_fingerprint=b"p" * 8,
    issued_at=NOW + timedelta(seconds=1),
    round_xmin=(7 << 32) + 4_000_000_000,
    previous_xmin=(7 << 32) + 3_999_999_000,
)


def decode(text: str, **kwargs: object) -> ProgressToken | RetiredToken:
    options: dict[str, object] = {"binding": BINDING, "secret": KEY, "previous_secrets": ()}
    options.update(kwargs)
    return decode_progress(text, **options)  # type: ignore[arg-type]


def test_round_trip_keeps_every_field_to_the_microsecond() -> None:
    text = encode_progress(TOKEN, binding=BINDING, secret=KEY)
    assert decode(text) == TOKEN
    heads = TOKEN._replace(phase=Phase.HEADS, cursor_key=b"\x01" * 16)
    assert decode(encode_progress(heads, binding=BINDING, secret=KEY)) == heads
    done = TOKEN._replace(phase=Phase.DONE, cursor_key=b"")
    assert decode(encode_progress(done, binding=BINDING, secret=KEY)) == done


def test_tokens_are_compact_url_safe_and_opaque() -> None:
    text = encode_progress(TOKEN, binding=BINDING, secret=KEY)
    assert len(text) < 240
    assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    # Nothing of the plaintext shows: not the cursor key, not the view digest.
    assert bytes(range(32)) not in raw and b"v" * 16 not in raw
    # Two tokens of the same state differ (random nonce), and both decode.
    other = encode_progress(TOKEN, binding=BINDING, secret=KEY)
    assert other != text and decode(other) == TOKEN


def test_every_changed_character_is_refused() -> None:
    text = encode_progress(TOKEN, binding=BINDING, secret=KEY)
    alphabet = "AQgw_-9z"
    for position in range(len(text)):
        for replacement in alphabet:
            if replacement == text[position]:
                continue
            tampered = text[:position] + replacement + text[position + 1 :]
            with pytest.raises(InvalidProgress):
                decode(tampered)


def test_another_reader_community_or_filter_is_refused() -> None:
    text = encode_progress(TOKEN, binding=BINDING, secret=KEY)
    for other in (
        token_binding(community_id=7, reader="cd" * 32, filter_digest=b"f" * 32),
        token_binding(community_id=8, reader="ab" * 32, filter_digest=b"f" * 32),
        token_binding(community_id=7, reader="ab" * 32, filter_digest=b"g" * 32),
    ):
        with pytest.raises(InvalidProgress):
            decode(text, binding=other)


def test_retired_key_is_recognised_for_a_reset_and_unknown_keys_are_refused() -> None:
    old = encode_progress(TOKEN, binding=BINDING, secret=OLD_KEY)
    assert decode(old, previous_secrets=(OTHER_KEY, OLD_KEY)) == RetiredToken("retired relay key")
    with pytest.raises(InvalidProgress):
        decode(old, previous_secrets=(OTHER_KEY,))
    with pytest.raises(InvalidProgress):
        decode(old)


def test_older_version_resets_and_newer_version_is_refused() -> None:
    v1 = encode_progress(TOKEN, binding=BINDING, secret=KEY, version=1)
    assert decode(v1, current_version=2) == RetiredToken("older token version")
    v2 = encode_progress(TOKEN, binding=BINDING, secret=KEY, version=2)
    assert decode(v2, current_version=2) == TOKEN
    with pytest.raises(InvalidProgress):
        decode(v2, current_version=1)


@pytest.mark.parametrize(
    "garbage",
    ["", "x", "====", "not a token", "é" * 40, "A" * 5, "A" * 400, "A" * 10_000, "AAAA\n", "/+/+"],
)
def test_garbage_is_refused(garbage: str) -> None:
    with pytest.raises(InvalidProgress):
        decode(garbage)


@given(st.binary(max_size=300))
def test_arbitrary_bytes_only_ever_raise_invalid_progress(data: bytes) -> None:
    text = base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    with pytest.raises(InvalidProgress):
        decode(text)
    if data:
        with pytest.raises(InvalidProgress):
            decode(base64.urlsafe_b64encode(bytes([1]) + data).rstrip(b"=").decode())


@given(st.text(max_size=400))
def test_arbitrary_text_only_ever_raises_invalid_progress(text: str) -> None:
    with pytest.raises(InvalidProgress):
        decode(text)


def test_the_view_and_the_catch_up_round_trip_and_stay_small() -> None:
    channels = tuple(sorted(bytes([i]) * 16 for i in range(10)))
    token = TOKEN._replace(listing_version=2**40, view_private=channels,
                           catchup=frozenset(channels[3:5]),
                           catchup_pending=True, catchup_cursor=channels[3] + b"\x07" * 16)
    text = encode_progress(token, binding=BINDING, secret=KEY)
    assert decode(text) == token
    started = token._replace(catchup_cursor=channels[4])  # from the start of a channel
    assert decode(encode_progress(started, binding=BINDING, secret=KEY)) == started
    not_carried = token._replace(view_private=None)
    assert decode(encode_progress(not_carried, binding=BINDING, secret=KEY)) == not_carried


def test_the_largest_token_stays_under_a_kilobyte() -> None:
    """The view part is a reference: whatever V's size, the sets a token carries are bounded."""
    ids = [i.to_bytes(16, "big") for i in range(MAX_PRIVATE_CHANNELS + MAX_CATCHUP_CHANNELS)]
    largest = TOKEN._replace(
        listing_version=2**62, view_private=tuple(ids[:MAX_PRIVATE_CHANNELS]),
        catchup=frozenset(ids[MAX_PRIVATE_CHANNELS:]), catchup_pending=True,
        catchup_cursor=ids[-1] + ids[0],
    )
    text = encode_progress(largest, binding=BINDING, secret=KEY)
    assert decode(text) == largest
    assert len(text) < 1000


def test_stored_sets_are_named_by_their_digest() -> None:
    stored = TOKEN._replace(view_private=(), private_ref=b"p" * 16, catchup_ref=b"c" * 16,
                            catchup_pending=True, stored_at=NOW)
    text = encode_progress(stored, binding=BINDING, secret=KEY)
    assert decode(text) == stored
    assert len(text) < 300


# Sealed by the relay before `ProgressToken` was a named tuple (main at 051aff4), with the nonce
# bytes 100-111: the layout on the wire did not change with it, and tokens clients hold decode.
SEALED_BEFORE = {
    "plain": (
        "AmRlZmdoaWprbG1ubx3BwJmKlydui_jg2mkEPunKHMbE4GPgk4kyGCg4jMMrIfp8pst2nT766w9diysOzDmpLNtP4lQ"
        "H5W4kLKPUyKx4b4NDPfuOnn5T0wyli60sZl3jxJjQfQeHvDH1WA_aOszSB7rNveP4nUS2CABL3Q_LAll2qqMJuZ-1"
        "w8QttmVs2UcDgrJOMOcueA-lDK6Pxq4O27tR8MusXZ3dQzfrKVTDhR6cQf8"
    ),
    "inline sets": (
        "AmRlZmdoaWprbG1ubwX2sriD8QH-EkAX1jib0P-fVLqlkNS6arymflG0U66gC0Tw4IrfarJPlFH524Rk9H9tyYx5iOa"
        "FSuDpWdqZe91TAJEkbZw3bgIIuwgVlgI24k7N-ax4mwxIAq2Ldsr2Fucp6sGN6WwuWFWJDWC_JquVxuiy5cRYs-ZHO4"
        "AplCdej5WM70cpTw2vv7_yFzoimuM0t5Xoq25w1h6I2iCeJNY1M0yXXqi5-EKN5X2HbhkHb7lxfeyW1jFNs-R1wYfcc"
        "ABQ4W48p7xp3emlquEekhZtlMorsEp97s2bpm0vKnIWo2n14p4wAmhOQM8crkTbpwD4q1F3Zg"
    ),
    "stored sets": (
        "AmRlZmdoaWprbG1ubweACWgE5mLkFLYziJdUr4H0DXtIInIB0HXz3EO9NanR-06YOfKKpiduBPNY0jJZnw9L36B-E8U"
        "3HUkWOn1GGWAixQKB2bZ9wY5a73qm2jrlkz3NNMsYAvDrcfADilTxzkZKfwZN0Q1m5V42aIfUx3SFyypbO7RgNF1lJx"
        "_Mu5QkegzPf5oXcoq8lbuW0XFISFMpTJZlVmWkJLdCEStfkh8wapKeTHgoxn2uE76WUvvp2gGCCpLtvztsk52YNzQdT"
        "Q_7qOGrnQ"
    ),
}
SEALED_STATES = {
    "plain": TOKEN,
    "inline sets": TOKEN._replace(
        listing_version=2**40 + 5, view_private=(b"\x01" * 16, b"\x07" * 16),
        catchup=frozenset({b"\x09" * 16, b"\x03" * 16}), catchup_pending=True,
        catchup_cursor=b"\x03" * 16, stored_at=NOW - timedelta(hours=2, microseconds=3),
    ),
    "stored sets": TOKEN._replace(view_private=(), private_ref=b"p" * 16,
                                  catchup_ref=b"c" * 16, stored_at=NOW),
}


@pytest.mark.parametrize("name", sorted(SEALED_BEFORE))
def test_tokens_sealed_before_decode_and_seal_byte_for_byte_alike(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert decode(SEALED_BEFORE[name]) == SEALED_STATES[name]
    monkeypatch.setattr("artifacts.tokens.urandom", lambda n: bytes(range(100, 100 + n)))
    assert encode_progress(SEALED_STATES[name], binding=BINDING, secret=KEY) == SEALED_BEFORE[name]


@given(st.datetimes(min_value=datetime(1970, 1, 1), timezones=st.just(UTC)))
def test_every_moment_round_trips_to_the_microsecond(moment: datetime) -> None:
    token = TOKEN._replace(round_t=moment, watermark=moment, cursor_at=moment, view_t=moment,
                           issued_at=moment, stored_at=moment)
    decoded = decode(encode_progress(token, binding=BINDING, secret=KEY))
    assert decoded == token
    assert isinstance(decoded, ProgressToken) and decoded.stored_at.tzinfo is UTC


def test_a_token_of_the_previous_version_is_retired() -> None:
    """Version 1 carried V itself; its tokens start over."""
    text = encode_progress(TOKEN, binding=BINDING, secret=KEY, version=1)
    assert decode(text) == RetiredToken("older token version")


@pytest.mark.parametrize("bad", [
    {"view_private": (b"\x02" * 16, b"\x01" * 16)},  # not sorted
    {"view_private": (b"\x01" * 15,)},
    {"view_private": tuple(i.to_bytes(16, "big") for i in range(MAX_PRIVATE_CHANNELS + 1))},
    {"catchup": frozenset(i.to_bytes(16, "big") for i in range(MAX_CATCHUP_CHANNELS + 1))},
    {"catchup": frozenset({b"\x02" * 15})},
    {"catchup_cursor": b"\x01" * 5},
    {"private_ref": b"\x01" * 15},
    {"view_private": (b"\x01" * 16,), "private_ref": b"\x01" * 16},
    {"view_private": None, "private_ref": b"\x01" * 16},
    {"catchup": frozenset({b"\x02" * 16}), "catchup_ref": b"\x01" * 16},
])
def test_an_inconsistent_view_part_is_never_sealed(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        encode_progress(TOKEN._replace(**bad), binding=BINDING, secret=KEY)  # type: ignore[arg-type]
