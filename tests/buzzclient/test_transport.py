from __future__ import annotations

import io
import re
import time

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
    line = ProgressLine(stream, terminal=True, interval=0)
    full = RoundSummary(kind="full", incremental=True, pages=3, items=2500, seconds=2.0)
    line.update(_Round(full, done=False))  # type: ignore[arg-type]
    assert stream.getvalue() == "\rfull round: 2,500 items, 3 pages, 1,250 items/s, 2.0 s"
    line.update(_Round(RoundSummary(kind="continuation", incremental=True), True))  # type: ignore[arg-type]
    line.clear()
    assert stream.getvalue().endswith("\r" + " " * 54 + "\r")


def test_off_a_terminal_a_long_full_round_writes_a_line_every_so_often() -> None:
    log = io.StringIO()
    line = ProgressLine(log, terminal=False, every=0.05)
    one = RoundSummary(kind="full", incremental=True, pages=1, items=1, seconds=0.1)
    line.update(_Round(one, done=False))  # type: ignore[arg-type]
    assert log.getvalue() == ""  # a short round shows only its summary
    time.sleep(0.06)
    line.update(_Round(one, done=False))  # type: ignore[arg-type]
    [written] = log.getvalue().splitlines()
    assert re.fullmatch(r"\d\d:\d\d:\d\d full round: 1 item, 1 page, 10 items/s, 0\.1 s so far",
                        written), written
    time.sleep(0.06)
    line.update(_Round(one, done=True))  # type: ignore[arg-type]
    assert len(log.getvalue().splitlines()) == 1  # the summary line follows; no redraws
    assert "\r" not in log.getvalue()


def test_summary_lines() -> None:
    summary = RoundSummary(kind="continuation", incremental=True, pages=1, items=4,
                           seconds=0.25)
    summary.changes.added, summary.changes.updated, summary.changes.removed = 1, 2, 1
    assert summary.line() == (
        "continuation round: +1 added, ~2 updated, -1 removed; 4 items in 1 page, 0.25 s"
    )
    full = RoundSummary(kind="full", incremental=True, pages=3, items=2500, seconds=2.0,
                        resets=1, waited=1.5)
    full.changes.added = 2500
    assert full.line() == (
        "full round: +2,500 added, ~0 updated, -0 removed, 1 reset; 2,500 items in 3 pages,"
        " 2.00 s (1,250 items/s), waited 1.5 s"
    )
    one = RoundSummary(kind="full", incremental=True, pages=1, items=1, seconds=0.5, resets=2)
    one.changes.added = 1
    assert one.line() == (
        "full round: +1 added, ~0 updated, -0 removed, 2 resets; 1 item in 1 page, 0.50 s"
        " (2 items/s)"
    )
    quiet = RoundSummary(kind="continuation", incremental=True, pages=1, items=3, seconds=0.06)
    assert quiet.line() == "continuation round: no changes; 3 items in 1 page, 0.06 s"
    assert quiet.as_dict()["added"] == 0 and quiet.as_dict()["items"] == 3
