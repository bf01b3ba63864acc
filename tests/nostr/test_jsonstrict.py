"""Strict JSON: what parsers disagree on is refused, everything else reads as the stdlib does."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nostr.jsonstrict import StrictJSONError, is_int, loads_strict

# --- accepted documents -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "b": [true, false, null], "c": {"d": "e"}}',
        '{"a:b": "c:d", "e": "::"}',  # colons inside keys and values are not pairs
        '{"\\u003a": 1}',  # an escaped colon alone is no duplicate
        '[{"a": 1}, {"a": 2}]',  # the same key in two objects is fine
        '"\\ud83d\\ude00"',  # a surrogate pair is one character
        " [1, -0, 1.5e3] ",
        "{}",
        "[]",
    ],
)
def test_accepts_what_the_stdlib_reads(text: str) -> None:
    assert loads_strict(text) == json.loads(text)
    assert loads_strict(text.encode()) == json.loads(text)
    assert loads_strict(bytearray(text.encode())) == json.loads(text)
    assert loads_strict(memoryview(text.encode())) == json.loads(text)


# --- refused documents ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2}',
        '{"x": {"a": 1, "a": 1}}',
        '[1, {"b": [{"a": 1, "a": 2}]}]',
        '{"a:b": 1, "a:b": 2}',
        '{"a": 1, "\\u0061": 2}',  # the same key written two ways
        '{"\\u003a": 1, ":": 2}',  # an escaped colon takes the exact path
        '{"\\u003A": "x", "\\u003a": "y"}',
        '{"k": "v:v", "k": "w"}',
        '{"a": {"b": 1}, "a": {"b": 1}}',
    ],
)
def test_duplicate_keys_are_refused(text: str) -> None:
    with pytest.raises(StrictJSONError, match="duplicate key"):
        loads_strict(text)


@pytest.mark.parametrize(
    "raw",
    [
        b'"\\ud800"',  # escaped high surrogate alone
        b'"\\udc00"',  # escaped low surrogate alone
        b'"\\ude00\\ud83d"',  # a pair in the wrong order
        b'["\\ud83d x"]',
        b'"\xed\xa0\x80"',  # a surrogate encoded as UTF-8 bytes (CESU-8)
        '"\ud800"',  # a lone surrogate in a Python str
    ],
)
def test_lone_surrogates_are_refused(raw: bytes | str) -> None:
    with pytest.raises(StrictJSONError, match="lone surrogate"):
        loads_strict(raw)


@pytest.mark.parametrize(
    "text", ["NaN", "[Infinity]", '{"a": -Infinity}', "[1e400]", "[-1e999]", "[nan]"]
)
def test_non_finite_numbers_are_refused(text: str) -> None:
    with pytest.raises(StrictJSONError):
        loads_strict(text)


@pytest.mark.parametrize(
    "raw", [b"", b"{", b"[1,]", b"\xef\xbb\xbf[1]", b"\xff", b"[01]", b"'a'", b"[1] x", b'"\x01"']
)
def test_malformed_documents_are_refused_with_a_short_reason(raw: bytes) -> None:
    with pytest.raises(StrictJSONError) as caught:
        loads_strict(raw)
    assert isinstance(caught.value, ValueError)
    assert 0 < len(str(caught.value)) <= 80


@pytest.mark.parametrize("duplicate", [False, True])
def test_deepest_nesting_orjson_accepts_is_checked_exactly(duplicate: bool) -> None:
    # The escaped colon (with another colon in a string) sends the document down the exact
    # stdlib path, which recurses: it must decide, not crash, at orjson's deepest nesting.
    depth = 1023
    inner = '{"\\u003a": ":", ":": 1}' if duplicate else '{"\\u003a": ":"}'
    text = "[" * depth + inner + "]" * depth
    if duplicate:
        with pytest.raises(StrictJSONError):
            loads_strict(text)
    else:
        value = loads_strict(text)
        for _ in range(depth):
            value = value[0]
        assert value == {":": ":"}


def test_is_int_excludes_bool_and_float() -> None:
    assert is_int(0)
    assert is_int(-(2**70))
    assert not is_int(True)
    assert not is_int(False)
    assert not is_int(1.0)
    assert not is_int("1")
    assert not is_int(None)


# --- properties -------------------------------------------------------------------------------

_keys = st.text(alphabet=st.sampled_from('ab:"\\é😀\n'), max_size=4)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=8)
    | st.text(alphabet=st.sampled_from(':\\"/\x00\u2028é'), max_size=6)
)


def _object_pairs(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # A JSON object as a list of pairs, so that duplicate keys can be written.
    return st.lists(st.tuples(_keys, children), max_size=4).map(_Obj)


class _Obj(list[tuple[str, Any]]):
    """Pairs of one JSON object, rendered in order, duplicates included."""


_documents = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | _object_pairs(children),
    max_leaves=20,
)


def _render(value: Any, *, ascii_only: bool, escape_colons: bool, spaced: bool) -> str:
    def string(text: str) -> str:
        out = json.dumps(text, ensure_ascii=ascii_only)
        # No JSON escape contains ':', so every ':' here is content: escape it as \u003a.
        return out.replace(":", "\\u003a") if escape_colons else out

    comma, colon = (", ", ": ") if spaced else (",", ":")

    def render(node: Any) -> str:
        if isinstance(node, _Obj):
            return "{" + comma.join(string(k) + colon + render(v) for k, v in node) + "}"
        if isinstance(node, list):
            return "[" + comma.join(render(item) for item in node) + "]"
        if isinstance(node, str):
            return string(node)
        return json.dumps(node)

    return render(value)


def _has_duplicates(value: Any) -> bool:
    if isinstance(value, _Obj):
        keys = [k for k, _ in value]
        return len(set(keys)) != len(keys) or any(_has_duplicates(v) for _, v in value)
    if isinstance(value, list):
        return any(_has_duplicates(item) for item in value)
    return False


def _plain(value: Any) -> Any:
    if isinstance(value, _Obj):
        return {k: _plain(v) for k, v in value}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


@settings(max_examples=400)
@given(
    document=_documents,
    ascii_only=st.booleans(),
    escape_colons=st.booleans(),
    spaced=st.booleans(),
    as_bytes=st.booleans(),
)
def test_duplicates_are_found_exactly(
    document: Any, ascii_only: bool, escape_colons: bool, spaced: bool, as_bytes: bool
) -> None:
    text = _render(document, ascii_only=ascii_only, escape_colons=escape_colons, spaced=spaced)
    raw: bytes | str = text.encode() if as_bytes else text
    if _has_duplicates(document):
        with pytest.raises(StrictJSONError, match="duplicate key"):
            loads_strict(raw)
    else:
        assert loads_strict(raw) == _plain(document)


@settings(max_examples=300)
@given(raw=st.binary(max_size=64) | st.text(max_size=64))
def test_arbitrary_input_raises_only_strict_json_error(raw: bytes | str) -> None:
    with contextlib.suppress(StrictJSONError):
        loads_strict(raw)


@settings(max_examples=300)
@given(text=st.text(alphabet=st.sampled_from('{}[]":,\\u0123456789abcdefd8tnlrue -.'), max_size=40))
def test_json_like_noise_raises_only_strict_json_error(text: str) -> None:
    try:
        parsed = loads_strict(text)
    except StrictJSONError:
        return
    # Whatever is accepted is what the stdlib reads, except that integers outside the 64-bit
    # range come back as floats (documented; integer checks then refuse them).
    assert parsed == json.loads(text, parse_int=_int_as_orjson_reads_it)


def _int_as_orjson_reads_it(digits: str) -> int | float:
    number = int(digits)
    return number if -(2**63) <= number < 2**64 else float(digits)
