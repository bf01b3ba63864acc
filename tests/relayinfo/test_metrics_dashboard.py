"""docs/grafana-dashboard.json: a dashboard Grafana imports, whose every PromQL expression names
only metrics a running relay really exports (scraped from `buzz-admin serve`), with counters
only ever read through rate()/increase() and gauges never.

No PromQL parser is packaged for Python, so `promql_metrics` reads what the dashboard needs of
an expression: the metric names and the functions around each.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from artifacts.models import Community
from tests.faults.clients import Client, Collection, WsClient
from tests.relay_server import HOST, ROOT, start_relay
from tests.relayinfo.conftest import transactional

DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
RATE_FUNCTIONS = {"rate", "irate", "increase"}
# Functions over gauges' values in time (fine on a gauge, wrong on a counter).
GAUGE_RANGE_FUNCTIONS = {"changes", "delta", "deriv", "max_over_time", "min_over_time",
                         "avg_over_time"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
            "and", "or", "unless", "inf", "nan"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_RANGE = re.compile(r"\[([^\]]*)\]")
_TOKEN = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*|[()]")


def promql_metrics(expr: str) -> list[tuple[str, tuple[str, ...]]]:
    """(metric name, the functions enclosing it, innermost last) for each selector of `expr`."""
    text = _GROUPING.sub(" ", _MATCHERS.sub(" ", _STRING.sub('""', expr)))
    text = _RANGE.sub(" ", text)
    found: list[tuple[str, tuple[str, ...]]] = []
    stack: list[str | None] = []
    tokens = list(_TOKEN.finditer(text))
    for index, match in enumerate(tokens):
        token = match[0]
        following = tokens[index + 1][0] if index + 1 < len(tokens) else ""
        if token == "(":
            previous = tokens[index - 1][0] if index else ""
            is_call = index and previous not in ("(", ")") and previous.lower() not in KEYWORDS
            stack.append(previous if is_call else None)
        elif token == ")":
            stack.pop()
        elif following == "(" or token.lower() in KEYWORDS:
            continue  # a function name (pushed with its parenthesis) or an operator
        else:
            found.append((token, tuple(name for name in stack if name)))
    assert not stack, f"unbalanced parentheses: {expr}"
    return found


def test_promql_metrics_reads_names_and_their_functions() -> None:
    expr = ('histogram_quantile(0.99, sum by (le, endpoint) (rate(a_bucket{x=~"$i",s="5.."}'
            '[$__rate_interval]))) / on (instance) sum(b) or max(changes(c[1h]))')
    assert promql_metrics(expr) == [
        ("a_bucket", ("histogram_quantile", "sum", "rate")),
        ("b", ("sum",)),
        ("c", ("max", "changes")),
    ]


def _targets(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def test_dashboard_is_a_grafana_dashboard() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 30
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "instance"} <= variables
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["refId"] and target["expr"], panel["title"]
            # Each instance can be picked: every selector filters on the variable.
            assert target["expr"].count('instance=~"$instance"') == len(
                promql_metrics(target["expr"])
            ), target["expr"]
            for window in _RANGE.findall(target["expr"]):
                assert window == "$__rate_interval" or re.fullmatch(r"\d+[mh]", window), window


@pytest.fixture
def exported(community: Community) -> dict[str, tuple[str, str]]:
    """{sample name: (its family, the family's type)} of a running relay's /metrics after some
    traffic of every kind the dashboard shows (HTTP, rounds, a WebSocket subscription)."""
    Community.objects.create(host=HOST, name="Local")
    relay = start_relay({"RELAY_RATE_LIMIT_ADDRESS_RATE": "0"})
    try:
        reader = Collection(Client(relay.url))
        reader.round()
        reader.round()
        ws = WsClient(relay.port, [reader.client.secret])
        try:
            assert ws.req("s", {"kinds": [45010]})[-1] == ["EOSE", "s"]
            text = httpx.get(f"{relay.url}/metrics", timeout=10).text
        finally:
            ws.close()
    finally:
        relay.stop()
        relay.log_path.unlink()
    return {
        sample.name: (family.name, family.type)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@transactional
def test_every_expression_names_exported_metrics_with_rate_on_counters_only(
    exported: dict[str, tuple[str, str]],
) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    shown: set[str] = set()
    for title, expr in _targets(dashboard):
        selectors = promql_metrics(expr)
        assert selectors, expr
        for name, functions in selectors:
            assert name in exported, f"{title}: {name} is not exported"
            family, kind = exported[name]
            shown.add(family)
            rated = RATE_FUNCTIONS & set(functions)
            if kind in ("counter", "histogram") and not name.endswith("_created"):
                # A counter's value is meaningless on its own (it restarts at 0 with the
                # process); a histogram's buckets, sum and count are counters.
                assert rated, f"{title}: {name} is a {kind} read without rate()"
                if "histogram_quantile" in functions:
                    assert name.endswith("_bucket") and "sum" in functions, expr
            else:
                assert not rated, f"{title}: rate() of the gauge {name}"
                assert "histogram_quantile" not in functions, expr
            if GAUGE_RANGE_FUNCTIONS & set(functions):
                assert kind == "gauge", f"{title}: {name} is a {kind}"
    # Every metric of the relay's own has a panel.
    relay_families = {family for family, _kind in exported.values()
                      if family.startswith("buzz_")}
    assert relay_families - shown == set()
