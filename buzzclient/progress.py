"""A one-line progress display on stderr while a full round runs (no dependency, no curses)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from buzzclient.sync import Round


class ProgressLine:
    """Redraws one line in place with ``\\r`` when the stream is a terminal, else stays quiet
    (a log file should get the per-round summary, not hundreds of redraws)."""

    def __init__(
        self, stream: TextIO | None = None, *, enabled: bool | None = None, interval: float = 0.1
    ) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.interval = interval
        self._last_draw = 0.0
        self._width = 0

    def update(self, current: Round) -> None:
        """Called after every page; draws only for full rounds and at most every interval."""
        if not self.enabled or current.summary.kind != "full":
            return
        now = time.monotonic()
        if not current.done and now - self._last_draw < self.interval:
            return
        self._last_draw = now
        summary = current.summary
        rate = summary.items / summary.seconds if summary.seconds > 0 else 0.0
        text = (
            f"full round: {summary.items:,} items, {summary.pages} pages, "
            f"{rate:,.0f} items/s, {summary.seconds:.1f} s"
        )
        if summary.waited:
            text += f" (waited {summary.waited:.1f} s)"
        self._width = max(self._width, len(text))
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()

    def clear(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
