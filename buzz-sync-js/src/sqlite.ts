/**
 * SQLite storage for Node (better-sqlite3 12.x; 13.x needs Node 22). One file may hold many
 * collections; each page and its token are written in one `BEGIN IMMEDIATE` transaction.
 *
 * Other programs may read the file at any time through the `collection_artifacts` view (the
 * live slot of every collection), as with buzz-sync's file.
 */

import Database from "better-sqlite3";

import type { AppliedPage, CollectionState, OutboxEntry, PagePlan, Slot, Store } from "./store.js";
import { applyEntries, checkVersion, emptyState, noChanges, stateAfter } from "./store.js";
import type { ArtifactRow, CollectionQuery, NostrEvent } from "./types.js";
import { compareRows, matches } from "./types.js";

/** The file's layout, in `PRAGMA user_version`. 0: the first (artifacts keyed by the
 * collection's text key, WITHOUT ROWID); 2: an integer collection id in a rowid table, as
 * buzz-sync's own file has: every row and index entry carried the ~108-character key, and a
 * first sync's SQLite CPU fell ~20% without it (docs/performance.md). */
export const SQLITE_SCHEMA_VERSION = 2;

const TABLES = `
CREATE TABLE IF NOT EXISTS collections (
  id INTEGER PRIMARY KEY,
  key TEXT NOT NULL UNIQUE,
  state TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS artifacts (
  collection INTEGER NOT NULL, -- collections.id
  slot INTEGER NOT NULL,
  d TEXT NOT NULL,
  event_id TEXT NOT NULL,
  channel TEXT NOT NULL,
  type TEXT,
  title TEXT,
  created_at INTEGER NOT NULL,
  event TEXT NOT NULL,
  UNIQUE (collection, slot, d)
);
CREATE INDEX IF NOT EXISTS artifacts_channel ON artifacts (collection, slot, channel);
CREATE INDEX IF NOT EXISTS artifacts_modified ON artifacts (collection, slot, created_at);
CREATE TABLE IF NOT EXISTS outbox (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  key TEXT NOT NULL,
  event TEXT NOT NULL,
  queued_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE VIEW IF NOT EXISTS collection_artifacts AS
  SELECT c.key AS collection, a.d, a.event_id, a.channel, a.type, a.title, a.created_at, a.event
  FROM artifacts AS a JOIN collections AS c ON c.id = a.collection
  WHERE a.slot = json_extract(c.state, '$.liveSlot');
`;

/** Version 0 -> 2, inside the caller's transaction: the old tables are renamed, the new ones
 * made, the rows copied with their collection's new id (every collection keeps its state,
 * token included, and both slots), the old ones dropped. The outbox and meta stay as they are. */
const FROM_VERSION_0 = `
DROP VIEW IF EXISTS collection_artifacts;
DROP INDEX IF EXISTS artifacts_channel;
DROP INDEX IF EXISTS artifacts_modified;
ALTER TABLE collections RENAME TO collections_v0;
ALTER TABLE artifacts RENAME TO artifacts_v0;
${TABLES}
INSERT INTO collections (key, state) SELECT key, state FROM collections_v0 ORDER BY key;
INSERT INTO artifacts (collection, slot, d, event_id, channel, type, title, created_at, event)
  SELECT c.id, a.slot, a.d, a.event_id, a.channel, a.type, a.title, a.created_at, a.event
  FROM artifacts_v0 AS a JOIN collections AS c ON c.key = a.key;
DROP TABLE artifacts_v0;
DROP TABLE collections_v0;
`;

/** Brings the file to SQLITE_SCHEMA_VERSION in one transaction (a crash leaves it as it was). */
function migrate(db: Database.Database): void {
  db.transaction(() => {
    const version = db.pragma("user_version", { simple: true }) as number;
    if (version === SQLITE_SCHEMA_VERSION) return;
    if (version > SQLITE_SCHEMA_VERSION) throw new Error(`this SQLite file has schema version ${version}, newer than this package's ${SQLITE_SCHEMA_VERSION}`);
    const columns = db.prepare<[], { name: string }>("SELECT name FROM pragma_table_info('artifacts')").all().map((c) => c.name);
    db.exec(columns.includes("key") ? FROM_VERSION_0 : TABLES);
    db.pragma(`user_version = ${SQLITE_SCHEMA_VERSION}`);
  }).immediate();
}

interface RowRecord {
  d: string;
  event: string;
}

export class SqliteStore implements Store {
  /** better-sqlite3 writes synchronously (see `Store`). */
  readonly writesOnCallingThread = true;
  readonly db: Database.Database;
  private readonly statements;

  /** `path`: a file, or `:memory:`. */
  constructor(path: string) {
    this.db = new Database(path);
    this.db.pragma("journal_mode = WAL");
    this.db.pragma("synchronous = NORMAL");
    migrate(this.db);
    const db = this.db;
    // Artifacts are addressed by the collection's integer id (`collectionId`), never its key.
    this.statements = {
      state: db.prepare<[string], { id: number; state: string }>("SELECT id, state FROM collections WHERE key = ?"),
      insertState: db.prepare("INSERT INTO collections (key, state) VALUES (?, ?) ON CONFLICT (key) DO NOTHING"),
      setState: db.prepare("UPDATE collections SET state = ? WHERE id = ?"),
      clear: db.prepare("DELETE FROM artifacts WHERE collection = ? AND slot = ?"),
      deleteChannel: db.prepare("DELETE FROM artifacts WHERE collection = ? AND slot = ? AND channel = ?"),
      deleteD: db.prepare("DELETE FROM artifacts WHERE collection = ? AND slot = ? AND d = ?"),
      head: db.prepare<[number, number, string], { event_id: string }>("SELECT event_id FROM artifacts WHERE collection = ? AND slot = ? AND d = ?"),
      put: db.prepare(
        "INSERT INTO artifacts (collection, slot, d, event_id, channel, type, title, created_at, event) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)" +
          " ON CONFLICT (collection, slot, d) DO UPDATE SET event_id = excluded.event_id, channel = excluded.channel, type = excluded.type," +
          " title = excluded.title, created_at = excluded.created_at, event = excluded.event",
      ),
      count: db.prepare<[number, number], { n: number }>("SELECT count(*) AS n FROM artifacts WHERE collection = ? AND slot = ?"),
      swapCounts: db.prepare<{ c: number; old: number; new: number }, { kept: number; updated: number }>(
        "SELECT count(*) AS kept, coalesce(sum(n.event_id != o.event_id), 0) AS updated FROM artifacts AS n" +
          " JOIN artifacts AS o ON o.collection = n.collection AND o.slot = :old AND o.d = n.d WHERE n.collection = :c AND n.slot = :new",
      ),
      get: db.prepare<[number, number, string], RowRecord>("SELECT d, event FROM artifacts WHERE collection = ? AND slot = ? AND d = ?"),
      outboxAdd: db.prepare("INSERT INTO outbox (key, event, queued_at) VALUES (?, ?, ?)"),
      outboxList: db.prepare<[string], { id: number; event: string; queued_at: number }>("SELECT id, event, queued_at FROM outbox WHERE key = ? ORDER BY id"),
      outboxRemove: db.prepare("DELETE FROM outbox WHERE key = ? AND id = ?"),
      getMeta: db.prepare<[string], { value: string }>("SELECT value FROM meta WHERE name = ?"),
      setMeta: db.prepare("INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value"),
    };
  }

  /** The collection's integer id and state (made empty on first use). */
  private readState(key: string): { id: number; state: CollectionState } {
    this.statements.insertState.run(key, JSON.stringify(emptyState()));
    const found = this.statements.state.get(key)!;
    return { id: found.id, state: JSON.parse(found.state) as CollectionState };
  }

  async open(key: string): Promise<CollectionState> {
    return this.readState(key).state;
  }

  async state(key: string): Promise<CollectionState> {
    return this.readState(key).state;
  }

  async applyPage(key: string, plan: PagePlan): Promise<AppliedPage> {
    const s = this.statements;
    const run = this.db.transaction((): AppliedPage => {
      const { id, state: before } = this.readState(key);
      checkVersion(before, plan);
      const slot = plan.target;
      const live = before.liveSlot;
      if (plan.clearTarget) s.clear.run(id, slot);
      let changes = applyEntries(
        {
          deleteChannel: (channel) => s.deleteChannel.run(id, slot, channel).changes,
          deleteD: (d) => s.deleteD.run(id, slot, d).changes > 0,
          headOf: (d) => s.head.get(id, slot, d)?.event_id,
          put: (row) => {
            s.put.run(id, slot, row.d, row.eventId, row.channel, row.type, row.title, row.createdAt, JSON.stringify(row.event));
          },
        },
        plan.page,
        slot === live,
      );
      if (slot !== live) {
        changes = noChanges();
        if (plan.swap) changes = this.swap(id, live, slot);
      }
      const after = stateAfter(before, plan);
      s.setState.run(JSON.stringify(after), id);
      return { state: after, changes };
    });
    // IMMEDIATE takes the write lock up front, so the version check cannot race another
    // process between our read and our write.
    return run.immediate();
  }

  private swap(id: number, old: Slot, fresh: Slot) {
    const s = this.statements;
    const oldCount = s.count.get(id, old)!.n;
    const newCount = s.count.get(id, fresh)!.n;
    if (oldCount === 0) return { added: newCount, updated: 0, removed: 0, upserted: null, deleted: null };
    const { kept, updated } = s.swapCounts.get({ c: id, old, new: fresh })!;
    s.clear.run(id, old);
    return { added: newCount - kept, updated, removed: oldCount - kept, upserted: null, deleted: null };
  }

  /** The collection's id and live slot. */
  private live(key: string): [number, Slot] {
    const { id, state } = this.readState(key);
    return [id, state.liveSlot];
  }

  async get(key: string, d: string): Promise<ArtifactRow | undefined> {
    const found = this.statements.get.get(...this.live(key), d);
    return found ? rowFromJson(found.event) : undefined;
  }

  async query(key: string, query: CollectionQuery): Promise<ArtifactRow[]> {
    const where = ["collection = ?", "slot = ?"];
    const params: unknown[] = [...this.live(key)];
    const inList = (column: string, value: string | readonly string[] | undefined) => {
      if (value === undefined) return;
      const values = typeof value === "string" ? [value] : [...value];
      where.push(`${column} IN (${values.map(() => "?").join(",") || "NULL"})`);
      params.push(...values);
    };
    inList("channel", query.channel);
    inList("type", query.type);
    if (query.titleContains) {
      // A first cut in SQL (ASCII case-folding); `matches` below decides exactly.
      where.push("instr(lower(title), lower(?)) > 0");
      params.push(query.titleContains);
    }
    const order = query.orderBy === "title" ? "" : " ORDER BY created_at DESC, d";
    const limit = query.limit !== undefined && query.orderBy !== "title" ? ` LIMIT ${Math.max(0, Math.floor(query.limit))}` : "";
    const rows = this.db.prepare<unknown[], RowRecord>(`SELECT d, event FROM artifacts WHERE ${where.join(" AND ")}${order}${limit}`).all(...params);
    const found = rows.map((r) => rowFromJson(r.event)).filter((row) => matches(row, query));
    if (query.orderBy === "title") {
      found.sort(compareRows(query));
      return query.limit !== undefined ? found.slice(0, query.limit) : found;
    }
    return found;
  }

  async count(key: string): Promise<number> {
    return this.statements.count.get(...this.live(key))!.n;
  }

  async outboxAdd(key: string, event: NostrEvent): Promise<OutboxEntry> {
    const queuedAt = Date.now();
    const id = Number(this.statements.outboxAdd.run(key, JSON.stringify(event), queuedAt).lastInsertRowid);
    return { id, event, queuedAt };
  }

  async outboxList(key: string): Promise<OutboxEntry[]> {
    return this.statements.outboxList.all(key).map((r) => ({ id: r.id, event: JSON.parse(r.event) as NostrEvent, queuedAt: r.queued_at }));
  }

  async outboxRemove(key: string, id: number): Promise<void> {
    this.statements.outboxRemove.run(key, id);
  }

  async getMeta(name: string): Promise<string | undefined> {
    return this.statements.getMeta.get(name)?.value;
  }

  async setMeta(name: string, value: string): Promise<void> {
    this.statements.setMeta.run(name, value);
  }

  async close(): Promise<void> {
    this.db.close();
  }
}

import { rowOf } from "./types.js";

function rowFromJson(text: string): ArtifactRow {
  return rowOf(JSON.parse(text) as NostrEvent);
}
