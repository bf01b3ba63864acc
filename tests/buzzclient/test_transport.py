from __future__ import annotations

import io

import pytest

from buzzclient.progress import ProgressLine
from buzzclient.sync import RoundSummary
from buzzclient.transport import RelayAddress, RelayInfo


@pytest.mark.parametrize(
    ("url", "base", "host"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000", "127.0.0.1"),
        ("HTTP://LocalHost:8000/", "http://localhost:8000", "localhost"),
        ("https://relay.example:443", "https://relay.example", "relay.example"),
        ("wss://relay.example/", "https://relay.example", "relay.example"),
        ("ws://[::1]:8000", "http://[::1]:8000", "::1"),
    ],
)
def test_relay_urls_reduce_to_scheme_host_and_community(url: str, base: str, host: str) -> None:
    address = RelayAddress.parse(url)
    assert (address.base_url, address.host) == (base, host)
    assert address.url("/query") == base + "/query"


def test_websocket_url_follows_the_http_scheme() -> None:
    assert RelayAddress.parse("https://relay.example").ws_url("/") == "wss://relay.example/"
    assert RelayAddress.parse("http://127.0.0.1:8000").ws_url("/") == "ws://127.0.0.1:8000/"


@pytest.mark.parametrize(
    "url", ["ftp://x", "http://x/relay", "http://x/?a=1", "http://user@x", "http://x:99999"]
)
def test_other_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        RelayAddress.parse(url)


def test_the_capability_needs_both_the_extension_and_its_object() -> None:
    document = {
        "supported_extensions": ["artifacts.incremental", "artifacts.sync"],
        "artifacts": {"incremental": {"endpoint": "/query", "max_limit": 500},
                      "sync": {"endpoint": "/"}},
    }
    info = RelayInfo.from_document(document)
    assert (info.incremental, info.sync, info.max_limit, info.query_endpoint) == (
        True, True, 500, "/query"
    )
    assert not RelayInfo.from_document({**document, "supported_extensions": []}).incremental
    assert not RelayInfo.from_document({**document, "artifacts": {}}).incremental
    bare = RelayInfo.from_document({"name": "old relay"})
    assert (bare.incremental, bare.sync, bare.max_limit) == (False, False, 1000)


class _Round:
    def __init__(self, summary: RoundSummary, done: bool) -> None:
        self.summary, self.done = summary, done


def test_progress_is_drawn_in_place_for_full_rounds_only() -> None:
    stream = io.StringIO()
    line = ProgressLine(stream, enabled=True, interval=0)
    full = RoundSummary(kind="full", incremental=True, pages=3, items=2500, seconds=2.0)
    line.update(_Round(full, done=False))  # type: ignore[arg-type]
    assert stream.getvalue() == "\rfull round: 2,500 items, 3 pages, 1,250 items/s, 2.0 s"
    line.update(_Round(RoundSummary(kind="continuation", incremental=True), True))  # type: ignore[arg-type]
    line.clear()
    assert stream.getvalue().endswith("\r" + " " * 54 + "\r")
    quiet = io.StringIO()
    ProgressLine(quiet).update(_Round(full, done=True))  # type: ignore[arg-type]
    assert quiet.getvalue() == ""  # not a terminal: the summary line is enough


def test_summary_lines() -> None:
    summary = RoundSummary(kind="continuation", incremental=True, pages=1, items=4,
                           seconds=0.25)
    summary.changes.added, summary.changes.updated, summary.changes.removed = 1, 2, 1
    assert summary.line() == (
        "continuation round: +1 added, ~2 updated, -1 removed, 0 resets; 4 items in 1 page,"
        " 0.25 s"
    )
    full = RoundSummary(kind="full", incremental=True, pages=3, items=2500, seconds=2.0,
                        resets=1, waited=1.5)
    full.changes.added = 2500
    assert full.line() == (
        "full round: +2500 added, ~0 updated, -0 removed, 1 resets; 2500 items in 3 pages,"
        " 2.00 s (1,250 items/s), waited 1.5 s"
    )
