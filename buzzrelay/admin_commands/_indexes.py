"""Concurrent builds of the five sync indexes and the replay's, with progress (build-indexes).

Each build is a `CREATE INDEX CONCURRENTLY` in its own autocommit session with `lock_timeout` 0
and no statement timeout: it holds only a SHARE UPDATE EXCLUSIVE lock, so writers keep writing,
and a budget would only cancel it halfway and leave an invalid index behind. An invalid index
(a failed or interrupted build) is dropped concurrently first. A second session polls
`pg_stat_progress_create_index` for the bar; neither session ever holds a transaction open,
because a concurrent build waits for every transaction older than itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import psycopg

from artifacts.schema import BUILT_INDEXES, IndexCheck, IndexSpec, inspect_index
from buzzrelay.admin_commands._pg import connect, describe_error

BUILD_POLL_SECONDS = 0.25
WAITING_STATES = ("no table", "waiting for 0077")


@dataclass(frozen=True)
class BuildOutcome:
    """What build-indexes did with one index, and the index's state afterwards."""

    before: IndexCheck
    action: str  # kept, built, rebuilt, waiting, refused, failed
    seconds: float | None
    after: IndexCheck
    error: str | None = None

    @property
    def name(self) -> str:
        return self.before.name

    @property
    def ok(self) -> bool:
        """Built or valid, or legitimately waiting for its table or columns (a later step)."""
        return self.after.ok or (self.error is None and self.after.state in WAITING_STATES)


class BuildInterrupted(Exception):
    """Ctrl-C during a build: the build was cancelled and its index is left invalid."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"interrupted while building {name}: the build was cancelled and may have left an "
            "invalid index; run `buzz-admin build-indexes` again to drop and rebuild it"
        )
        self.name = name


class Progress:
    """Renders one build's progress: a redrawn bar on a terminal, phase changes in a log."""

    def __init__(self, stream: TextIO, *, interactive: bool | None = None) -> None:
        self.stream = stream
        self.interactive = stream.isatty() if interactive is None else interactive
        self._last: tuple[str, str, int | None] | None = None

    def update(
        self, name: str, phase: str, fraction: float | None, detail: str = "",
        waiting_for: int | None = None,
    ) -> None:
        """Show one poll. In a log, a line per phase, and per transaction the build waits for
        (`waiting_for`, a backend pid): the operator learns which session holds it up."""
        if self.interactive:
            filled = round(20 * (fraction or 0.0))
            bar = f"[{'#' * filled}{'.' * (20 - filled)}] {round(100 * (fraction or 0)):3d}%"
            text = f"  {name}  {bar}  {phase}{f' ({detail})' if detail else ''}"
            self.stream.write(f"\r\x1b[K{text}")
            self.stream.flush()
        elif self._last != (name, phase, waiting_for):
            self.stream.write(f"  {name}: {phase}{f' ({detail})' if detail else ''}\n")
            self.stream.flush()
        self._last = (name, phase, waiting_for)

    def finish(self, name: str, message: str) -> None:
        prefix = "\r\x1b[K" if self.interactive else ""
        self.stream.write(f"{prefix}  {name}: {message}\n")
        self.stream.flush()
        self._last = None


def _progress_of(row: Sequence[Any] | None) -> tuple[str, float | None, str, int | None]:
    """(phase, fraction of the phase done, detail, pid waited for) from one
    pg_stat_progress_create_index row."""
    if row is None:
        return "starting", None, "", None
    phase, lockers_total, lockers_done, locker_pid, blocks_total, blocks_done, tuples_total, \
        tuples_done = row
    if lockers_total:
        detail = f"{lockers_done}/{lockers_total} transactions"
        if locker_pid:
            detail += f", now backend pid {locker_pid}"
        return phase, lockers_done / lockers_total, detail, locker_pid or None
    if blocks_total:
        return phase, blocks_done / blocks_total, f"{blocks_done}/{blocks_total} blocks", None
    if tuples_total:
        return phase, tuples_done / tuples_total, f"{tuples_done}/{tuples_total} tuples", None
    return phase, None, "", None


def _run_watched(
    build: psycopg.Connection[Any],
    poll: psycopg.Connection[Any],
    name: str,
    statements: Sequence[tuple[str, str]],
    progress: Progress,
) -> None:
    """Run `statements` ((label, sql) pairs) in `build` from a worker thread; poll progress here."""
    pid = build.info.backend_pid
    failure: list[BaseException] = []
    current = [""]

    def work() -> None:
        try:
            for label, sql in statements:
                current[0] = label
                build.execute(sql)
        except BaseException as exc:  # handed to the main thread
            failure.append(exc)

    worker = threading.Thread(target=work, name=f"build {name}", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            if current[0] == "drop":
                progress.update(name, "dropping the invalid index concurrently", None)
            else:
                row = poll.execute(
                    """
                    SELECT phase, lockers_total, lockers_done, current_locker_pid,
                           blocks_total, blocks_done, tuples_total, tuples_done
                    FROM pg_stat_progress_create_index WHERE pid = %s
                    """,
                    [pid],
                ).fetchone()
                progress.update(name, *_progress_of(row))
            worker.join(BUILD_POLL_SECONDS)
    except KeyboardInterrupt:
        build.cancel_safe()
        worker.join()
        raise BuildInterrupted(name) from None
    if failure:
        raise failure[0]


def build_indexes(
    *,
    progress: Progress,
    replace_mismatched: bool = False,
    specs: Sequence[IndexSpec] = BUILT_INDEXES,
) -> list[BuildOutcome]:
    """Make every index of `specs` exist, valid, with its exact definition, concurrently.

    Valid ones are kept; invalid ones dropped concurrently and rebuilt; ones with another
    definition only with `replace_mismatched`; ones whose table or columns do not exist yet are
    reported as waiting. A failed build does not stop the others.
    """
    outcomes = []
    with connect("build-indexes") as build, connect("build-indexes progress") as poll:
        build.execute("SET lock_timeout = 0")
        build.execute("SET statement_timeout = 0")
        for spec in specs:
            before = inspect_index(poll, spec)
            action, error, seconds = _decide(before, replace_mismatched), None, None
            if action in ("built", "rebuilt"):
                statements = [("create", spec.create_sql(concurrently=True))]
                if before.exists:
                    statements.insert(0, ("drop", spec.drop_sql(concurrently=True)))
                started = time.monotonic()
                try:
                    _run_watched(build, poll, spec.name, statements, progress)
                    seconds = time.monotonic() - started
                except psycopg.Error as exc:
                    action, error = "failed", describe_error(exc)
            after = inspect_index(poll, spec)
            outcome = BuildOutcome(before, action, seconds, after, error)
            progress.finish(spec.name, _summary(outcome))
            outcomes.append(outcome)
    return outcomes


def _decide(check: IndexCheck, replace_mismatched: bool) -> str:
    state = check.state
    if state == "ok":
        return "kept"
    if state in WAITING_STATES:
        return "waiting"
    if state == "building":
        return "refused"
    if state == "missing":
        return "built"
    if state == "wrong definition" and not replace_mismatched:
        return "refused"
    return "rebuilt"


def _summary(outcome: BuildOutcome) -> str:
    after = outcome.after
    if outcome.action == "kept":
        return "valid, kept"
    if outcome.action == "waiting":
        return f"{after.state}: {after.problem}"
    if outcome.action == "refused":
        return f"left alone ({outcome.before.state}): {outcome.before.fix}"
    if outcome.error:
        return f"FAILED: {outcome.error}; {after.state} now: {after.fix}"
    took = f" in {outcome.seconds:.1f} s" if outcome.seconds is not None else ""
    what = "dropped the old index and rebuilt it" if outcome.action == "rebuilt" else "built"
    return f"{what}{took}, {'valid' if after.ok else after.state}"
