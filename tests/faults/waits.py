"""Polling helpers: faults take effect in their own time; tests wait for a condition, bounded."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until[T](
    condition: Callable[[], T], *, timeout: float = 30, interval: float = 0.2
) -> T:
    """The first truthy value of `condition()`; AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {timeout} s")
        time.sleep(interval)
