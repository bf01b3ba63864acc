"""The one filter of POST /query: what is served, and everything refused as invalid_filter."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from artifacts.selectors.filters import InvalidFilter, parse_filter, parse_query_body

D1 = "00000000-0000-4000-8000-000000000001"
D2 = "00000000-0000-4000-8000-000000000002"


def body(*filters: Any) -> bytes:
    return orjson.dumps(list(filters))


def test_plain_defaults_and_sorted_deduplicated_values() -> None:
    query = parse_query_body(body({"artifact": "current", "#h": [D2, D1, D2]}))
    assert (query.artifact, query.limit, query.offset, query.incremental) == (
        "current", 100, 0, False,
    )
    assert query.values("h") == (D1, D2)
    assert query.values("type") is None


def test_incremental_filter_and_its_canonical_form() -> None:
    a = parse_filter({"artifact": "current", "progress": None, "#h": [D2, D1], "#type": ["x.y"],
                      "limit": 5, "kinds": [45010]})
    b = parse_filter({"#type": ["x.y", "x.y"], "#h": [D1, D2, D1], "artifact": "current",
                      "progress": "tok", "limit": 1000})
    assert a.incremental and a.progress is None and b.progress == "tok"
    # limit is not bound; order and duplicates do not matter.
    assert a.canonical_digest() == b.canonical_digest()
    c = parse_filter({"artifact": "current", "progress": None, "#h": [D1]})
    assert c.canonical_digest() != a.canonical_digest()
    # No #type is not the same filter as an empty one would be (empty lists are refused anyway).
    d = parse_filter({"artifact": "current", "progress": None, "#h": [D1, D2]})
    assert d.canonical_digest() != a.canonical_digest()


def test_history_and_generic_tags_in_plain_mode() -> None:
    query = parse_filter({"artifact": "history", "#d": [D1], "#title": ["A task"], "offset": 10000,
                          "limit": 1000})
    assert query.values("title") == ("A task",)
    assert query.offset + query.limit == 11_000


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{}",
        b"null",
        b'{"artifact": "current"}',
        b"[]",
        b'[{"artifact": "current"}, {"artifact": "current"}]',
        b'[{"artifact": "current", "artifact": "history"}]',
        b'[{"artifact": "current", "limit": NaN}]',
        b"[1]",
        b'["current"]',
    ],
)
def test_bodies_that_are_not_one_filter(raw: bytes) -> None:
    with pytest.raises(InvalidFilter):
        parse_query_body(raw)


@pytest.mark.parametrize(
    "fields",
    [
        {},  # artifact is required
        {"artifact": "all"},
        {"artifact": "history"},  # history needs #d
        {"artifact": "current", "kinds": [1]},
        {"artifact": "current", "kinds": [45010, 45011]},
        {"artifact": "current", "kinds": [45010.0]},
        {"artifact": "current", "kinds": 45010},
        {"artifact": "current", "limit": 0},
        {"artifact": "current", "limit": 1001},
        {"artifact": "current", "limit": True},
        {"artifact": "current", "limit": 10.0},
        {"artifact": "current", "limit": "10"},
        {"artifact": "current", "offset": -1},
        {"artifact": "current", "offset": 10001},
        {"artifact": "current", "authors": ["ab" * 32]},
        {"artifact": "current", "since": 0},
        {"artifact": "current", "ids": []},
        {"artifact": "current", "#h": []},
        {"artifact": "current", "#h": "x"},
        {"artifact": "current", "#h": [1]},
        {"artifact": "current", "#h": ["not-a-uuid"]},
        {"artifact": "current", "#d": ["0000000A-0000-4000-8000-00000000000B"]},
        {"artifact": "current", "#": ["x"]},
        {"artifact": "current", "# bad": ["x"]},
        {"artifact": "current", **{f"#t{i}": ["x"] for i in range(33)}},
        {"artifact": "current", "#t": [str(i) for i in range(257)]},
        {"artifact": "current", "#t": ["x" * 40000, "y" * 30000]},
        # incremental mode: current only, #h and #type only, no offset, token string or null
        {"artifact": "history", "#d": [D1], "progress": None},
        {"artifact": "current", "progress": None, "offset": 0},
        {"artifact": "current", "progress": None, "#d": [D1]},
        {"artifact": "current", "progress": None, "#title": ["x"]},
        {"artifact": "current", "progress": 5},
        {"artifact": "current", "progress": {"t": 1}},
    ],
)
def test_refused_filters(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidFilter):
        parse_filter(fields)
    with pytest.raises(InvalidFilter):
        parse_query_body(body(fields))


def test_limits_at_their_bounds_are_accepted() -> None:
    parse_filter({"artifact": "current", "limit": 1, "offset": 0})
    parse_filter({"artifact": "current", **{f"#t{i}": ["x"] for i in range(32)}})
    parse_filter({"artifact": "current", "#t": [str(i) for i in range(256)]})


def test_view_changes_opt_in_is_per_request_and_not_bound() -> None:
    base = {"artifact": "current", "progress": None, "#h": [D1]}
    opted = parse_filter({**base, "view_changes": "incremental"})
    assert opted.view_changes_incremental
    assert not parse_filter({**base, "view_changes": "reset"}).view_changes_incremental
    assert not parse_filter(base).view_changes_incremental
    # The token binds the same filter whatever the request says about view changes.
    assert opted.canonical_digest() == parse_filter(base).canonical_digest()


@pytest.mark.parametrize("fields", [
    {"progress": None, "view_changes": "yes"},
    {"progress": None, "view_changes": True},
    {"progress": None, "view_changes": ["incremental"]},
    {"progress": None, "view_changes": None},
    {"view_changes": "incremental"},  # plain mode
])
def test_bad_view_changes_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidFilter, match="view_changes"):
        parse_filter({"artifact": "current", **fields})
