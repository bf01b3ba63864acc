"""Django system checks, one per readiness item (buzz.W001 ... buzz.W006).

Warnings, never errors: `migrate` runs the database checks first, and a deployment that is not
ready yet must still be able to migrate (that is usually how it becomes ready). Like Django's own
database checks they run only when a database is named (`migrate`, `check --database default`),
and they say nothing when the database is unreachable or not migrated far enough to be inspected.
They only read: the sync epoch is never bumped from here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Warning, register
from django.db import connection

from relayinfo.readiness import TITLES, ReadinessReport, inspect_deployment

_MEMO_SECONDS = 5.0
_memo: tuple[float, ReadinessReport | None] | None = None


def _report() -> ReadinessReport | None:
    """One inspection shared by the six checks of a run; None when it cannot be made."""
    global _memo
    if _memo is not None and time.monotonic() - _memo[0] < _MEMO_SECONDS:
        return _memo[1]
    report = None
    if settings.DATABASES:
        try:
            with connection.cursor() as cursor:
                # Not migrated far enough (a fresh database, before `migrate`): nothing to say.
                cursor.execute(
                    "SELECT to_regclass('django_migrations') IS NOT NULL "
                    "AND to_regclass('sync_state') IS NOT NULL "
                    "AND to_regclass('artifact_heads') IS NOT NULL"
                )
                migrated = bool(cursor.fetchone()[0])
            if migrated:
                report = inspect_deployment(
                    connection, local_key_generated=bool(settings.RELAY_KEY_GENERATED)
                )
        except Exception:  # unreachable database: Django's own checks and migrate say so
            report = None
    _memo = (time.monotonic(), report)
    return report


def _item_check(item: int) -> Callable[..., list[CheckMessage]]:
    def check(
        app_configs: Sequence[Any] | None = None,
        databases: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> list[CheckMessage]:
        if not databases or "default" not in databases:
            return []
        report = _report()
        if report is None:
            return []
        result = report.item(item)
        if result.passed:
            return []
        return [
            Warning(
                f"deployment not ready (item {item}, {result.title.lower()}): {result.found}",
                hint=result.fix or None,
                id=result.system_check_id,
            )
        ]

    check.__name__ = f"readiness_item_{item}"
    check.__doc__ = TITLES[item]
    return check


for _item in TITLES:
    register(_item_check(_item), "buzz", "database")
