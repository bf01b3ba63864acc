"""A rule written once as the statements it runs, driven by synchronous or asynchronous code.

A rule in steps form is a generator: it yields a statement (or a batch of them), receives the
rows, decides, and yields the next; it returns its result. Every decision stays in the generator;
a driver only runs statements, on Django's connection or on an asyncio connection. `drive` and
`drive_async` are the one loop that does it (DESIGN.md's "no sync/async twins of the same rule":
the only twin left is this loop, which holds no rule).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import Any

__all__ = ["Params", "Rows", "Statement", "drive", "drive_async"]

Params = Sequence[Any] | Mapping[str, Any]
Statement = tuple[str, Params]
Rows = list[tuple[Any, ...]]


def drive[S, R, T](steps: Generator[S, R, T], run: Callable[[S], R]) -> T:
    """Run each step `steps` yields with `run`, sending back what it returns; `steps`' result."""
    try:
        step = next(steps)
        while True:
            step = steps.send(run(step))
    except StopIteration as done:
        result: T = done.value
        return result


async def drive_async[S, R, T](
    steps: Generator[S, R, T], run: Callable[[S], Awaitable[R]]
) -> T:
    """`drive`, awaiting `run`."""
    try:
        step = next(steps)
        while True:
            step = steps.send(await run(step))
    except StopIteration as done:
        result: T = done.value
        return result
