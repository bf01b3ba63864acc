"""When to retry and how long to wait: 429 ``Retry-After``, 503 and transport failures.

The relay answers 429 when the reader's per-pubkey budget is spent and tells how long to wait;
503 (work budget, database down) and connection failures say nothing about when to come back, so
waits grow exponentially up to a cap, with jitter so that many clients refused together do not
return together.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime


@dataclass(frozen=True)
class RetryPolicy:
    # First wait after a 503 or a transport failure, in seconds; doubled per further attempt.
    base: float = 0.5
    # Longest wait between two attempts; also the most a 429 Retry-After is honoured for without
    # giving up (a relay asking for more is treated as busy).
    cap: float = 30.0
    # Consecutive 503s / transport failures before giving up on one request.
    max_attempts: int = 8
    # Refused or unresolvable connections give up sooner: usually a wrong URL or a relay that
    # is down, which the person running the client should hear about within seconds.
    connect_attempts: int = 3
    # Consecutive 429s honoured for one request before giving up.
    max_rate_limited: int = 30
    random: Callable[[], float] = field(default=random.random, compare=False)

    def backoff(self, attempt: int) -> float:
        """The wait before retry number ``attempt`` (1, 2, ...): capped exponential, "equal
        jitter" (half fixed, half random), so a wait never collapses to zero."""
        ceiling: float = min(self.cap, self.base * 2 ** (attempt - 1))
        return ceiling / 2 + self.random() * ceiling / 2


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delay-seconds or an HTTP date), or None."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if seconds != seconds:  # NaN
        return None
    return max(0.0, seconds)
