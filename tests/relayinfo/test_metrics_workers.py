"""/metrics under `buzz-admin serve --workers 2` (a real server): whichever worker answers a
scrape, it reports the sum over both workers, so counters only grow from scrape to scrape."""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.parser import text_string_to_metric_families

from artifacts.models import Community
from tests.faults.clients import Client, Collection, WsClient
from tests.relay_server import HOST, RelayProcess, start_relay
from tests.relayinfo.conftest import transactional

pytestmark = [transactional, pytest.mark.slow]

DURATION_COUNT = "buzz_http_request_duration_seconds_count"
HEALTHZ = (DURATION_COUNT, (("endpoint", "healthz"), ("status", "200")))
NIP11 = (DURATION_COUNT, (("endpoint", "relay-info"), ("status", "200")))
QUERY = (DURATION_COUNT, (("endpoint", "post-query"), ("status", "200")))
FULL_ROUNDS = ("buzz_incremental_rounds_total", (("kind", "full"),))
CONTINUATION_ROUNDS = ("buzz_incremental_rounds_total", (("kind", "continuation"),))
START_RESETS = ("buzz_incremental_resets_total", (("cause", "start"),))
SUBSCRIPTIONS = ("buzz_websocket_subscriptions", ())
FRONT_DOOR = ("buzz_front_door_requests_total", ())


Scrape = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(url: str) -> Scrape:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _scrape_until(url: str, done: Callable[[Scrape], bool], timeout: float = 10) -> Scrape:
    """Scrape until `done` (a WebSocket's disconnect reaches its worker a moment after the
    client's close returns)."""
    deadline = time.monotonic() + timeout
    while True:
        scrape = _scrape(url)
        if done(scrape) or time.monotonic() > deadline:
            return scrape
        time.sleep(0.05)


def _healthz_by_worker(directory: Path) -> Counter[int]:
    """Each worker's own /healthz count, read from its file in the multiprocess directory."""
    counts: Counter[int] = Counter()
    for path in directory.glob("histogram_*.db"):
        pid = int(re.findall(r"\d+", path.name)[0])
        for key, value, _timestamp, _pos in MmapedDict.read_all_values_from_file(str(path)):
            _metric, name, labels, _help = json.loads(key)
            # A worker's file keeps each bucket's own observations (made cumulative, and the
            # count, only when a scrape collects them): its requests are their sum.
            labels.pop("le", None)
            if name == "buzz_http_request_duration_seconds_bucket" and labels == dict(HEALTHZ[1]):
                counts[pid] += int(value)
    return counts


def _start(directory: Path) -> RelayProcess:
    assert os.environ.get("REDIS_URL"), "two workers need the suite's Redis"
    return start_relay({"PROMETHEUS_MULTIPROC_DIR": str(directory),
                        "RELAY_RATE_LIMIT_ADDRESS_RATE": "0"}, workers=2)


def test_two_workers_counters_sum_over_the_workers_and_only_grow(
    community: Community, tmp_path: Path
) -> None:
    Community.objects.create(host=HOST, name="Local")  # the WebSocket's, on 127.0.0.1
    directory = tmp_path / "metrics"
    (directory).mkdir()
    (directory / "counter_999999.db").write_bytes(b"")  # an earlier run's file: removed
    relay = _start(directory)
    try:
        assert not (directory / "counter_999999.db").exists()
        warmup = _scrape(relay.url)  # wait_healthy's own /healthz requests count too
        base_healthz = warmup.get(HEALTHZ, 0.0)
        scrapes = []
        sent = 0
        rounds = 0
        readers = [Collection(Client(relay.url)) for _ in range(3)]
        with ThreadPoolExecutor(8) as pool:
            for _ in range(5):
                # New connections, several at a time: the kernel hands them to both workers.
                answers = list(pool.map(
                    lambda _: httpx.get(f"{relay.url}/healthz", timeout=10).status_code,
                    range(40),
                ))
                infos = list(pool.map(
                    lambda _: httpx.get(f"{relay.url}/info", headers={"Host": "team.example"},
                                        timeout=10).status_code,
                    range(10),
                ))
                assert set(answers) == {200} and set(infos) == {200}
                for reader in readers:  # a full round first, then continuation rounds
                    reader.round()
                rounds += len(readers)
                sent += 40
                scrapes.append((sent, _scrape(relay.url)))
        by_worker = _healthz_by_worker(directory)
        # Open WebSockets and their subscriptions: gauges summed over the live workers.
        ws = WsClient(relay.port, [readers[0].client.secret])
        try:
            assert ws.req("a", {"kinds": [45010]})[-1] == ["EOSE", "a"]
            assert ws.req("b", {"kinds": [45010]})[-1] == ["EOSE", "b"]
            ws.send(["CLOSE", "a"])
            assert ws.req("b", {"kinds": [45010]})[-1] == ["EOSE", "b"]  # replaces b
            during = _scrape(relay.url)
        finally:
            ws.close()
        after = _scrape_until(relay.url, lambda scrape: scrape[SUBSCRIPTIONS] == 0)
    finally:
        relay.stop()
        log = relay.log()
        relay.log_path.unlink()
    # Both workers served /healthz, and each scrape, answered by either, reported the sum.
    assert len([pid for pid, count in by_worker.items() if count]) == 2, (by_worker, log)
    assert sum(by_worker.values()) == base_healthz + sent
    previous: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for count, scrape in scrapes:
        assert scrape[HEALTHZ] == base_healthz + count
        assert scrape[NIP11] == count // 4
        # Each round here is one page; the first of each reader is a full round.
        done = count // 40 * len(readers)
        assert scrape[QUERY] == done
        assert scrape[FULL_ROUNDS] == len(readers)
        assert scrape[CONTINUATION_ROUNDS] == done - len(readers)
        assert scrape[START_RESETS] == len(readers)
        # NIP-11 and /query are the front door's.
        assert scrape[FRONT_DOOR] == count // 4 + done
        for key, value in scrape.items():
            if key[0].endswith(("_total", "_count", "_sum", "_bucket")) and key in previous \
                    and not key[0].startswith("process_"):
                assert value >= previous[key], key
        previous = scrape
    assert rounds == done
    assert during[("buzz_websocket_connections", ())] == 1
    assert during[SUBSCRIPTIONS] == 1
    assert after[("buzz_websocket_connections", ())] == 0
    assert after[SUBSCRIPTIONS] == 0
    assert after[("buzz_websocket_connections_opened_total", ())] == 1
    # Every fixed-label series is there before its first event (dashboards see 0, not nothing).
    for cause in ("lost", "stale", "slow_client"):
        assert after[("buzz_hub_drops_total", (("cause", cause),))] == 0
    for cause in ("retired", "epoch", "expired", "not_ready", "view"):
        assert after[("buzz_incremental_resets_total", (("cause", cause),))] == 0
    # Each worker's standard process metrics, labelled by pid (the supervisor's too).
    pids = {dict(labels)["pid"] for name, labels in previous
            if name == "process_start_time_seconds"}
    assert len(pids) >= 2
