"""The local collection: SQLite, one collection per (relay, community, pubkey, filter).

Each page is applied in one SQLite transaction together with the progress token it came with,
so after a crash the stored token always describes exactly the data stored beside it.

Full rounds are *staged*. Every collection has two slots of rows; ``live_slot`` names the one
readers see (the ``collection_artifacts`` view). A page that starts a full round (``reset: true``,
or any answer to ``progress: null``) empties the other slot and the round fills it page by page;
the page with ``more: false`` makes it live and drops the old slot, in its own transaction. This
is PROTOCOL.md's "empty the collection first", done so that a reader of the database never sees a
half-filled collection, and a crash in the middle of a full round leaves the previous complete
collection in place. Continuation rounds apply to the live slot directly.

Two processes syncing the same collection cannot interleave pages: every applied page bumps
``version`` and a page is applied only over the version its request was made from.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from buzzclient.errors import ConcurrentSync, SyncError
from buzzclient.page import ArtifactEvent, Page
from nostr.events import Event, served_event
from nostr.kinds import KIND_REMOVAL_MARKER

logger = logging.getLogger("buzzclient")

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS collections (
    id INTEGER PRIMARY KEY,
    relay TEXT NOT NULL,            -- http(s)://host[:port] of the relay
    community TEXT NOT NULL,        -- host the community is served at (lowercase, no port)
    pubkey TEXT NOT NULL,           -- the reader
    filter TEXT NOT NULL,           -- canonical JSON of the #h / #type predicates
    live_slot INTEGER NOT NULL DEFAULT 0,
    progress TEXT,                  -- token of the last applied page
    round_open INTEGER NOT NULL DEFAULT 0,   -- 1: that page said more: true
    target_slot INTEGER,            -- where the open round's pages go
    continuable INTEGER NOT NULL DEFAULT 0,  -- token came while the relay advertised
                                              -- artifacts.incremental: may start a continuation
    complete INTEGER NOT NULL DEFAULT 0,     -- the live slot holds a finished round
    version INTEGER NOT NULL DEFAULT 0,      -- bumped by every applied page
    rounds INTEGER NOT NULL DEFAULT 0,
    last_round_at TEXT,
    UNIQUE (relay, community, pubkey, filter)
);
CREATE TABLE IF NOT EXISTS artifacts (
    collection_id INTEGER NOT NULL REFERENCES collections (id) ON DELETE CASCADE,
    slot INTEGER NOT NULL,
    d TEXT NOT NULL,
    event_id TEXT NOT NULL,
    kind INTEGER NOT NULL,
    pubkey TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    channel TEXT NOT NULL,
    type TEXT,
    op TEXT,
    title TEXT,
    event TEXT NOT NULL,            -- the served event, re-encoded compactly (same id and sig)
    UNIQUE (collection_id, slot, d)
);
CREATE VIEW IF NOT EXISTS collection_artifacts AS
    SELECT c.id AS collection_id, c.relay, c.community, c.pubkey AS reader, c.filter,
           a.d, a.event_id, a.kind, a.pubkey AS author, a.created_at, a.channel, a.type,
           a.op, a.title, a.event
    FROM collections AS c
    JOIN artifacts AS a ON a.collection_id = c.id AND a.slot = c.live_slot;
"""

_UPSERT = """
INSERT INTO artifacts
    (collection_id, slot, d, event_id, kind, pubkey, created_at, channel, type, op, title, event)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (collection_id, slot, d) DO UPDATE SET
    event_id = excluded.event_id, kind = excluded.kind, pubkey = excluded.pubkey,
    created_at = excluded.created_at, channel = excluded.channel, type = excluded.type,
    op = excluded.op, title = excluded.title, event = excluded.event
"""

# SQLite's default limit on host parameters is 32766; pages hold at most 1000 entries.
_IN_CHUNK = 900


@dataclass(frozen=True)
class CollectionKey:
    relay: str
    community: str
    pubkey: str
    filter: str


@dataclass(frozen=True)
class CollectionState:
    id: int
    version: int
    live_slot: int
    progress: str | None
    round_open: bool
    target_slot: int | None
    continuable: bool
    complete: bool
    rounds: int


@dataclass
class Changes:
    """What a page (or a finished staged round) changed in the live collection."""

    added: int = 0
    updated: int = 0
    removed: int = 0

    def __iadd__(self, other: Changes) -> Changes:
        self.added += other.added
        self.updated += other.updated
        self.removed += other.removed
        return self


@dataclass(frozen=True)
class PageApplied:
    state: CollectionState  # after the page
    started_full_round: bool
    round_done: bool
    staged: bool  # the page went to the staging slot (a full round in progress or finished)
    changes: Changes  # to the live collection (a staged round's show up on its last page)


def _state(row: sqlite3.Row) -> CollectionState:
    return CollectionState(
        id=row["id"],
        version=row["version"],
        live_slot=row["live_slot"],
        progress=row["progress"],
        round_open=bool(row["round_open"]),
        target_slot=row["target_slot"],
        continuable=bool(row["continuable"]),
        complete=bool(row["complete"]),
        rounds=row["rounds"],
    )


class CollectionStore:
    """A SQLite file holding any number of collections."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        try:
            # autocommit=True: the module opens no transaction by itself; each page's
            # transaction is an explicit BEGIN IMMEDIATE ... COMMIT below. A store may be
            # handed to another thread (a watch loop); it is used by one thread at a time.
            self.db = sqlite3.connect(
                self.path, timeout=30.0, autocommit=True, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise SyncError(f"cannot open collection database {self.path}: {exc}") from None
        self.db.row_factory = sqlite3.Row
        try:
            # WAL: readers keep reading while a page is applied. synchronous=NORMAL is
            # crash-safe for the process (a killed client loses nothing committed); after an
            # OS crash the file may lose its last pages, but always whole pages with their
            # tokens, which a later round simply fetches again.
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA synchronous = NORMAL")
            self.db.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self.db.close()
            raise SyncError(f"{self.path} is not a usable collection database: {exc}") from None

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> CollectionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _migrate(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise SyncError(
                f"{self.path} was written by a newer buzz-sync (schema {version}); upgrade it"
            )
        if version < SCHEMA_VERSION:
            with self._transaction():
                self.db.executescript(_SCHEMA)
                self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        # IMMEDIATE takes the write lock up front, so the version check below cannot race
        # another writer between our read and our write.
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def open_collection(self, key: CollectionKey) -> CollectionState:
        """The collection's state, created empty on first use."""
        with self._transaction():
            self.db.execute(
                "INSERT INTO collections (relay, community, pubkey, filter) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (relay, community, pubkey, filter) DO NOTHING",
                (key.relay, key.community, key.pubkey, key.filter),
            )
        row = self.db.execute(
            "SELECT * FROM collections WHERE relay = ? AND community = ? AND pubkey = ?"
            " AND filter = ?",
            (key.relay, key.community, key.pubkey, key.filter),
        ).fetchone()
        return _state(row)

    def state(self, collection_id: int) -> CollectionState:
        row = self.db.execute("SELECT * FROM collections WHERE id = ?", (collection_id,)).fetchone()
        if row is None:
            raise SyncError(f"collection {collection_id} does not exist in {self.path}")
        return _state(row)

    def apply_page(
        self,
        collection_id: int,
        *,
        expected_version: int,
        sent_progress: str | None,
        page: Page,
        continuable: bool,
    ) -> PageApplied:
        """Apply one page and store its token, in one transaction.

        ``sent_progress`` is the token the page's request carried: ``None`` means the page
        starts a full round even if the relay forgot to say ``reset``. Raises
        ``ConcurrentSync`` (nothing applied) when another process applied a page since
        ``expected_version`` was read.
        """
        with self._transaction():
            row = self.db.execute(
                "SELECT * FROM collections WHERE id = ?", (collection_id,)
            ).fetchone()
            if row is None or row["version"] != expected_version:
                raise ConcurrentSync(
                    f"another process is syncing this collection in {self.path}; try again"
                )
            before = _state(row)
            # Logged inside the page's transaction (tests/buzzclient/test_crash_safety.py
            # kills the client right after it).
            logger.debug(
                "applying page: %d events, %d removed, more=%s reset=%s",
                len(page.events), len(page.removed), page.more, page.reset,
            )
            live, staging = before.live_slot, 1 - before.live_slot
            started_full = sent_progress is None or page.reset
            if started_full:
                target = staging
                self.db.execute(
                    "DELETE FROM artifacts WHERE collection_id = ? AND slot = ?",
                    (collection_id, staging),
                )
            elif before.round_open and before.target_slot is not None:
                target = before.target_slot
            else:
                target = live  # first page of a continuation round
            changes = self._apply_entries(collection_id, target, page)
            if target == staging:
                changes = Changes()  # counted against the live slot when the round finishes
            if page.more:
                self.db.execute(
                    "UPDATE collections SET version = version + 1, progress = ?,"
                    " round_open = 1, target_slot = ?, continuable = ? WHERE id = ?",
                    (page.progress, target, int(continuable), collection_id),
                )
            else:
                if target == staging:
                    changes = self._swap(collection_id, old=live, new=staging)
                self.db.execute(
                    "UPDATE collections SET version = version + 1, progress = ?,"
                    " round_open = 0, target_slot = NULL, continuable = ?, live_slot = ?,"
                    " complete = 1, rounds = rounds + 1,"
                    " last_round_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?",
                    (page.progress, int(continuable), target, collection_id),
                )
            after = self.state(collection_id)
        logger.debug("page committed (version %d)", after.version)
        return PageApplied(
            state=after,
            started_full_round=started_full,
            round_done=not page.more,
            staged=target == staging,
            changes=changes,
        )

    def _apply_entries(self, collection_id: int, slot: int, page: Page) -> Changes:
        changes = Changes()
        for channel in page.removed_channels:
            # PROTOCOL.md section 5: by the item's stored home, even one that has moved since
            # (a page of this round or the next brings it again from where it is now).
            cursor = self.db.execute(
                "DELETE FROM artifacts WHERE collection_id = ? AND slot = ? AND channel = ?",
                (collection_id, slot, channel),
            )
            changes.removed += cursor.rowcount
        if page.removed:
            for d, _reason in page.removed:
                cursor = self.db.execute(
                    "DELETE FROM artifacts WHERE collection_id = ? AND slot = ? AND d = ?",
                    (collection_id, slot, d),
                )
                changes.removed += cursor.rowcount
        heads = [event for event in page.events if event.kind != KIND_REMOVAL_MARKER]
        for marker in page.events:
            if marker.kind == KIND_REMOVAL_MARKER:
                # PROTOCOL.md section 2: a marker applies only while our head for d is the one
                # it names; a newer head (e.g. a move back) must survive a late marker.
                cursor = self.db.execute(
                    "DELETE FROM artifacts WHERE collection_id = ? AND slot = ? AND d = ?"
                    " AND event_id = ?",
                    (collection_id, slot, marker.d, marker.prev or ""),
                )
                changes.removed += cursor.rowcount
        if heads:
            existing = self._existing(collection_id, slot, [event.d for event in heads])
            for event in heads:
                known = existing.get(event.d)
                if known is None:
                    changes.added += 1
                elif known != event.event_id:
                    changes.updated += 1
            self.db.executemany(_UPSERT, [_row(collection_id, slot, event) for event in heads])
        return changes

    def _existing(self, collection_id: int, slot: int, ds: Sequence[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for start in range(0, len(ds), _IN_CHUNK):
            chunk = ds[start : start + _IN_CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self.db.execute(
                f"SELECT d, event_id FROM artifacts WHERE collection_id = ? AND slot = ?"
                f" AND d IN ({marks})",
                (collection_id, slot, *chunk),
            )
            found.update((row[0], row[1]) for row in rows)
        return found

    def _swap(self, collection_id: int, *, old: int, new: int) -> Changes:
        """Counts what a finished staged round changes, then drops the old slot's rows."""
        params = {"c": collection_id, "old": old, "new": new}
        old_count = self.db.execute(
            "SELECT count(*) FROM artifacts WHERE collection_id = :c AND slot = :old", params
        ).fetchone()[0]
        new_count = self.db.execute(
            "SELECT count(*) FROM artifacts WHERE collection_id = :c AND slot = :new", params
        ).fetchone()[0]
        if old_count == 0:
            return Changes(added=new_count)
        kept, updated = self.db.execute(
            "SELECT count(*), coalesce(sum(n.event_id != o.event_id), 0)"
            " FROM artifacts AS n JOIN artifacts AS o"
            " ON o.collection_id = n.collection_id AND o.slot = :old AND o.d = n.d"
            " WHERE n.collection_id = :c AND n.slot = :new",
            params,
        ).fetchone()
        self.db.execute(
            "DELETE FROM artifacts WHERE collection_id = :c AND slot = :old", params
        )
        return Changes(added=new_count - kept, updated=updated, removed=old_count - kept)

    def artifacts(self, collection_id: int) -> dict[str, Event]:
        """The live collection: ``d`` -> the stored event (checked when its page was applied)."""
        rows = self.db.execute(
            "SELECT a.d, a.event FROM artifacts AS a JOIN collections AS c"
            " ON a.collection_id = c.id AND a.slot = c.live_slot WHERE c.id = ?",
            (collection_id,),
        )
        return {row[0]: served_event(orjson.loads(row[1])) for row in rows}

    def listing(self, *, relay: str, community: str, reader: str) -> list[dict[str, Any]]:
        """Every artifact a reader's collections of one relay hold (each ``d`` once, from the
        collection synced last), ordered by channel and title: what ``buzz-sync list`` shows."""
        rows = self.db.execute(
            "SELECT v.d, v.channel, v.type, v.title, v.event_id, v.author, v.created_at"
            " FROM collection_artifacts AS v JOIN collections AS c ON c.id = v.collection_id"
            " WHERE v.relay = ? AND v.community = ? AND v.reader = ?"
            " ORDER BY c.last_round_at DESC",
            (relay, community, reader),
        )
        found: dict[str, dict[str, Any]] = {}
        for row in rows:
            found.setdefault(row["d"], dict(row))
        return sorted(found.values(), key=lambda row: (row["channel"], row["title"] or ""))

    def heads(self, collection_id: int) -> dict[str, str]:
        """The live collection as ``d`` -> head event id (cheap to compare)."""
        rows = self.db.execute(
            "SELECT a.d, a.event_id FROM artifacts AS a JOIN collections AS c"
            " ON a.collection_id = c.id AND a.slot = c.live_slot WHERE c.id = ?",
            (collection_id,),
        )
        return {row[0]: row[1] for row in rows}


def _row(collection_id: int, slot: int, entry: ArtifactEvent) -> tuple[Any, ...]:
    event = entry.event
    return (
        collection_id, slot, entry.d, event.id, event.kind, event.pubkey,
        event.created_at, entry.channel, entry.type, entry.op, entry.title, event.raw,
    )
