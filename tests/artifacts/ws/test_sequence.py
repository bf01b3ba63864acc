"""Loss detection from sequence numbers: model-based (Hypothesis) schedules of publishes that
arrive late, out of order, twice or never."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from artifacts.ws.sequence import RESET_DISTANCE, SequenceTracker

GRACE = 1.0


@st.composite
def schedules(draw: st.DrawFn) -> tuple[int, list[tuple[float, int]], set[int]]:
    """A baseline, arrivals `(time, seq)` in time order, and the numbers that never arrive."""
    baseline = draw(st.integers(0, 10_000))
    count = draw(st.integers(1, 60))
    numbers = range(baseline + 1, baseline + count + 1)
    lost = {n for n in numbers if draw(st.booleans()) and draw(st.booleans())}
    arrivals = []
    for n in numbers:
        if n in lost:
            continue
        published = (n - baseline) * 0.01
        # Delays stay well inside the grace period: overtaking is not loss.
        delay = draw(st.floats(0, GRACE * 0.8))
        arrivals.append((published + delay, n))
        if draw(st.integers(0, 9)) == 0:  # a duplicate delivery
            arrivals.append((published + draw(st.floats(0, GRACE * 0.8)), n))
    arrivals.sort()
    return baseline, arrivals, lost


@given(schedules())
def test_exactly_the_missing_numbers_before_the_last_arrival_are_reported(
    schedule: tuple[int, list[tuple[float, int]], set[int]],
) -> None:
    baseline, arrivals, lost = schedule
    tracker = SequenceTracker(baseline, grace=GRACE)
    reported = 0
    for at, seq in arrivals:
        tracker.observe(seq, at)
        reported += tracker.take_lost(at)
    end = (arrivals[-1][0] if arrivals else 0) + GRACE + 0.01
    reported += tracker.take_lost(end)
    highest = max((seq for _, seq in arrivals), default=baseline)
    # A loss can only be seen once a later number arrives; each is reported once.
    assert reported == len([n for n in lost if n < highest])
    assert not tracker.waiting


@given(st.integers(1, 50), st.floats(0, GRACE * 0.99))
def test_a_late_number_within_grace_is_not_a_loss(gap: int, late_by: float) -> None:
    tracker = SequenceTracker(0, grace=GRACE)
    tracker.observe(gap + 1, 0.0)  # 1..gap are overtaken
    assert tracker.waiting
    for n in range(1, gap + 1):
        tracker.observe(n, late_by)
    assert tracker.take_lost(10.0) == 0


def test_loss_is_reported_only_after_the_grace_period() -> None:
    tracker = SequenceTracker(5, grace=GRACE)
    tracker.observe(8, 100.0)  # 6 and 7 missing
    assert tracker.take_lost(100.5) == 0
    assert tracker.take_lost(101.0) == 2
    assert tracker.take_lost(200.0) == 0


def test_a_publisher_loss_report_and_a_counter_reset_count_as_losses() -> None:
    tracker = SequenceTracker(0, grace=GRACE)
    tracker.observe(1, 0.0)
    tracker.mark_lost()
    assert tracker.take_lost(0.0) == 1
    tracker.observe(RESET_DISTANCE + 10, 1.0)
    assert tracker.take_lost(1.0 + GRACE) == RESET_DISTANCE + 8
    # Redis lost its counter and starts again from 1: accounted, then tracked from there.
    tracker.observe(1, 3.0)
    assert tracker.take_lost(3.0) == 1
    tracker.observe(2, 3.1)
    assert tracker.take_lost(10.0) == 0
