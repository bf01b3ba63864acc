"""Progress of a full round on stderr (no dependency, no curses).

On a terminal one line is redrawn in place with ``\\r``; elsewhere (a log file, a service's
journal) a plain line is written every ``every`` seconds of a long round, so a log shows that a
big first sync is moving without hundreds of redraws.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from buzzclient.sync import Round, plural


class ProgressLine:
    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        enabled: bool = True,
        terminal: bool | None = None,
        interval: float = 0.1,
        every: float = 10.0,
    ) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self.interval = interval if self.terminal else every
        self._last_draw: float | None = None
        self._width = 0

    def update(self, current: Round) -> None:
        """Called after every page; draws only for full rounds and at most every interval."""
        if not self.enabled or current.summary.kind != "full":
            return
        now = time.monotonic()
        if self._last_draw is None:
            self._last_draw = now  # off a terminal: the first line after `every` seconds
            if not self.terminal:
                return
        if now - self._last_draw < self.interval and not (self.terminal and current.done):
            return
        if current.done and not self.terminal:
            return  # the round's summary says the rest
        self._last_draw = now
        summary = current.summary
        rate = summary.items / summary.seconds if summary.seconds > 0 else 0.0
        text = (
            f"full round: {plural(summary.items, 'item')}, {plural(summary.pages, 'page')}, "
            f"{rate:,.0f} items/s, {summary.seconds:.1f} s"
        )
        if summary.waited:
            text += f" (waited {summary.waited:.1f} s)"
        if self.terminal:
            self._width = max(self._width, len(text))
            self.stream.write("\r" + text.ljust(self._width))
        else:
            self.stream.write(f"{time.strftime('%H:%M:%S')} {text} so far\n")
        self.stream.flush()

    def clear(self) -> None:
        self._last_draw = None
        if self.enabled and self.terminal and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
