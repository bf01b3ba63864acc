"""What /metrics answers: every worker's counters (relaycore.metrics, summed in multiprocess
mode), each worker's `process_*` metrics (labelled `pid`), and the deployment's gauges read from
the database at scrape time (readiness, fleet, sync epoch); and the writers' stamp lag for the
staff page. Here, not beside the counters, because it reads relayinfo's and artifacts' state:
the counters sit on the ground floor, where every app records into them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    REGISTRY,
    CollectorRegistry,
    ProcessCollector,
    generate_latest,
    multiprocess,
    values,
)
from prometheus_client.core import GaugeMetricFamily, Metric

from artifacts.selectors.sync_epoch import current_sync_state
from artifacts.services.stamp_lag import stamp_lag_summary
from relaycore.metrics import multiprocess_directory
from relayinfo.readiness import evaluate_readiness

logger = logging.getLogger(__name__)


def stamp_lag(window_seconds: int = 3600) -> dict[str, float | int | None] | None:
    """The writers' stamp-to-commit lag over the window: {max_ms, p99_ms, samples}, or None."""
    try:
        return dict(stamp_lag_summary(window_seconds=window_seconds))
    except Exception as exc:
        logger.warning("stamp lag unavailable: %s", exc)
        return None


class DeploymentCollector:
    """The deployment's state at scrape time (the database's, the same from every worker):
    readiness per item, the fleet, the sync epoch."""

    def collect(self) -> Iterator[Metric]:
        report = evaluate_readiness()
        ready = GaugeMetricFamily("buzz_deployment_ready", "1 while PROTOCOL.md section 7 holds")
        ready.add_metric([], int(report.ready))
        yield ready
        checks = GaugeMetricFamily(
            "buzz_readiness_check", "1 per passing readiness item", labels=["item", "check"]
        )
        for check in report.checks:
            checks.add_metric([str(check.item), check.id], int(check.passed))
        yield checks
        if report.fleet is not None:
            live = GaugeMetricFamily("buzz_fleet_live_instances",
                                     "Registered relay instances seen recently")
            live.add_metric([], len(report.fleet.live_instances))
            yield live
            connections = GaugeMetricFamily("buzz_fleet_relay_connections",
                                            "Database connections named buzzrelay/...")
            connections.add_metric([], len(report.fleet.connections))
            yield connections
        try:
            epoch, _identity = current_sync_state()
        except Exception:
            return
        family = GaugeMetricFamily("buzz_sync_epoch", "The database's sync epoch")
        family.add_metric([], epoch)
        yield family


_WORKER_FILE = re.compile(r"^[a-z_]+?_(\d+)\.db$")


class WorkerProcessCollector:
    """The standard `process_*` metrics (CPU, memory, open files, start time) of every worker
    whose files are in the multiprocess directory and that is still running, labelled `pid`:
    prometheus_client's own process collector sees only the worker answering the scrape."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)

    def collect(self) -> Iterator[Metric]:
        pids = sorted({
            int(match[1]) for path in self.directory.glob("*.db")
            if (match := _WORKER_FILE.match(path.name))
        })
        merged: dict[str, Metric] = {}
        for pid in pids:
            if not Path(f"/proc/{pid}").exists():
                continue
            collector = ProcessCollector(pid=_pid_of(pid), registry=None)
            for family in collector.collect():
                target = merged.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type)
                )
                for sample in family.samples:
                    target.add_sample(sample.name, {**sample.labels, "pid": str(pid)},
                                      sample.value)
        yield from merged.values()


def _pid_of(pid: int) -> Callable[[], int]:
    return lambda: pid


def prometheus_exposition() -> tuple[bytes, str]:
    """The /metrics answer and its content type: every worker's counters and histograms (summed
    in multiprocess mode), each worker's process metrics, and the deployment's gauges."""
    registry = CollectorRegistry()
    directory = multiprocess_directory()
    # The mode prometheus_client chose when it was imported (the directory may have been set
    # later, e.g. by `manage.py serve` after Django's set-up: then this process counts in memory).
    if directory and values.ValueClass._multiprocess:
        multiprocess.MultiProcessCollector(registry, path=directory)
        registry.register(WorkerProcessCollector(directory))
        body = generate_latest(registry)
    else:
        # One process (tests, manage.py): the default registry has its metrics and process_*.
        body = generate_latest(REGISTRY)
    deployment = CollectorRegistry()
    deployment.register(DeploymentCollector())
    # The classic text format (version 0.0.4), which every Prometheus reads: the names here
    # need none of 1.0.0's escaping.
    return body + generate_latest(deployment), CONTENT_TYPE_PLAIN_0_0_4
