from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

from hypothesis import given
from hypothesis import strategies as st

from buzzclient.backoff import RetryPolicy, parse_retry_after


@given(
    attempt=st.integers(min_value=1, max_value=200),
    base=st.floats(min_value=0.01, max_value=5),
    cap=st.floats(min_value=0.1, max_value=120),
    draw=st.floats(min_value=0, max_value=1, exclude_max=True),
)
def test_backoff_grows_to_the_cap_and_never_collapses(
    attempt: int, base: float, cap: float, draw: float
) -> None:
    policy = RetryPolicy(base=base, cap=cap, random=lambda: draw)
    ceiling = min(cap, base * 2 ** (attempt - 1))
    wait = policy.backoff(attempt)
    assert ceiling / 2 <= wait <= ceiling


def test_jitter_spreads_clients_refused_together() -> None:
    policy = RetryPolicy(base=1, cap=30)
    assert len({round(policy.backoff(5), 6) for _ in range(50)}) > 40


def test_retry_after_in_seconds_or_as_a_date() -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 0 ") == 0.0
    later = format_datetime(now + timedelta(seconds=90), usegmt=True)
    earlier = format_datetime(now - timedelta(seconds=9), usegmt=True)
    assert parse_retry_after(later, now=now) == 90
    assert parse_retry_after(earlier, now=now) == 0
    assert parse_retry_after("-3") == 0.0
    for junk in (None, "", "soon", "nan"):
        assert parse_retry_after(junk) is None
