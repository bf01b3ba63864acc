"""A writer transaction on a connection of its own, held open while the test reads."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from django.db import connection, transaction


class HeldTransaction:
    """Runs callables inside one open transaction in its own thread (so its own connection),
    until `commit()` or `rollback()`."""

    def __init__(self) -> None:
        self._calls: queue.Queue[tuple[Callable[[], Any] | None, bool]] = queue.Queue()
        self._results: queue.Queue[tuple[bool, Any]] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        # Start the transaction now: xact_start is taken by its first statement.
        self.run(lambda: connection.cursor().execute("SELECT 1"))

    def _serve(self) -> None:
        commit = False
        try:
            with transaction.atomic():
                while True:
                    call, commit = self._calls.get()
                    if call is None:
                        break
                    try:
                        self._results.put((True, call()))
                    except BaseException as exc:
                        self._results.put((False, exc))
                if not commit:
                    transaction.set_rollback(True)
        finally:
            connection.close()
            self._results.put((True, None))

    def run(self, call: Callable[[], Any]) -> Any:
        self._calls.put((call, False))
        ok, value = self._results.get(timeout=30)
        if not ok:
            raise value
        return value

    def commit(self) -> None:
        self._finish(commit=True)

    def rollback(self) -> None:
        self._finish(commit=False)

    def _finish(self, *, commit: bool) -> None:
        self._calls.put((None, commit))
        self._thread.join(timeout=30)
        assert not self._thread.is_alive()
