"""Detecting lost live messages from per-group sequence numbers (pure code).

Publishers take the group's next number from one counter (Redis INCR) before publishing, so a
subscriber that joined at number B must eventually see every number after B. Publishers on
different threads or instances can be overtaken by each other, so a number that has not arrived
yet is not lost yet: it is lost when it is still missing `grace` seconds after a later number
arrived. Delivery is never held back for ordering; only the accounting waits.
"""

from __future__ import annotations

__all__ = ["SequenceTracker"]

# A jump larger than this is counted at once instead of tracking every missing number.
MAX_TRACKED_GAP = 10_000
# A number this far below the highest seen means the counter was reset (Redis lost its data).
RESET_DISTANCE = 1_000


class SequenceTracker:
    def __init__(self, baseline: int, *, grace: float) -> None:
        self.high = baseline
        self.grace = grace
        self._missing: dict[int, float] = {}  # number -> when it counts as lost
        self._lost_now = 0

    def observe(self, seq: int, now: float) -> None:
        """Account for message `seq` arriving at `now` (monotonic seconds)."""
        if seq <= self.high:
            if self._missing.pop(seq, None) is None and self.high - seq > RESET_DISTANCE:
                # Not a late arrival but a restarted counter: whatever was in flight across
                # the reset cannot be accounted for.
                self._lost_now += 1 + len(self._missing)
                self._missing.clear()
                self.high = seq
            return
        gap = seq - self.high - 1
        if gap > MAX_TRACKED_GAP:
            self._lost_now += gap
        else:
            deadline = now + self.grace
            for missing in range(self.high + 1, seq):
                self._missing[missing] = deadline
        self.high = seq

    def mark_lost(self) -> None:
        """A publisher reported a loss it could not number."""
        self._lost_now += 1

    @property
    def waiting(self) -> bool:
        """Whether some number is missing but still within its grace period."""
        return bool(self._missing)

    def take_lost(self, now: float) -> int:
        """How many messages are lost as of `now`; each loss is reported once."""
        lost, self._lost_now = self._lost_now, 0
        if self._missing:
            overdue = [seq for seq, deadline in self._missing.items() if deadline <= now]
            for seq in overdue:
                del self._missing[seq]
            lost += len(overdue)
        return lost
