"""Whether the deployment may serve incremental reads (PROTOCOL.md section 7), as the apps'
entry points ask it.

The verdict is relayinfo's (`relayinfo.readiness` inspects the schema, the fleet, the writers);
the rounds that depend on it are artifacts'. Both apps stand on this floor and artifacts never
imports relayinfo, so relayinfo hands its verdict down when Django starts (`relayinfo.apps`),
the way Django's contrib apps connect their signal receivers in `ready()`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured

from relaycore.dbthreads import run_db

__all__ = ["ReadinessVerdict", "cached", "ready", "ready_on_loop", "use_readiness_verdict"]


@dataclass(frozen=True)
class ReadinessVerdict:
    """`fresh()`: the verdict, evaluated if the process's cache has none (may read the
    database: call it on a database thread); `cached()`: the process's cached verdict, or None
    when it must be evaluated (safe on the event loop)."""

    fresh: Callable[[], bool]
    cached: Callable[[], bool | None]


_verdict: ReadinessVerdict | None = None


def use_readiness_verdict(verdict: ReadinessVerdict) -> None:
    global _verdict
    _verdict = verdict


def _registered() -> ReadinessVerdict:
    if _verdict is None:
        raise ImproperlyConfigured(
            "no readiness verdict: relayinfo (which gives it) is not in INSTALLED_APPS"
        )
    return _verdict


def ready() -> bool:
    """The verdict (may read the database: on a database thread)."""
    return _registered().fresh()


def cached() -> bool | None:
    """The process's cached verdict, or None when it must be evaluated."""
    return _registered().cached()


async def ready_on_loop() -> bool:
    """The verdict from the event loop: the cached one, else evaluated on a database thread."""
    verdict = cached()
    return verdict if verdict is not None else await run_db(ready)
