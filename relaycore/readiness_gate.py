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

__all__ = ["ReadinessVerdict", "cached_readiness", "deployment_ready", "use_readiness_verdict"]


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


def deployment_ready() -> bool:
    return _registered().fresh()


def cached_readiness() -> bool | None:
    return _registered().cached()
