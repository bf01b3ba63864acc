/**
 * IndexedDB storage for browsers. Each page and its token are written in one `readwrite`
 * transaction over the collection's state and its rows: a closed tab or a crash never leaves a
 * token ahead of its items. Reads a page needs (current heads, rows of removed channels) are
 * made first inside the same transaction; the shared `applyEntries` then runs on them and
 * queues the writes, which IndexedDB applies in order.
 */

import type { AppliedPage, CollectionState, LiveChanges, OutboxEntry, PagePlan, Slot, Store } from "./store.js";
import { applyEntries, checkVersion, emptyState, noChanges, stateAfter, swapChanges } from "./store.js";
import type { ArtifactRow, CollectionQuery, NostrEvent } from "./types.js";
import { matches, rowOf, runQuery } from "./types.js";

/** 1: rows held the whole event object. 2: rows are flat (the fields queries and the board
 * read) with the event as JSON text, parsed only when `row.event` is read, and a `modified`
 * index serves "newest first" with a limit from a cursor. 3: rows move to the `rows` store,
 * keyed by a small number per collection and slot (`part`) instead of the collection's
 * ~130-character key, which every row and both of its index entries repeated (twice in an
 * index entry: its own key and the row's); a row keeps the event's tags (JSON text) and
 * signature, not the whole event again beside the fields it was read into. Each collection
 * record holds its number (`id`). Opening a version 1 or 2 database moves its rows in the
 * upgrade's own transaction: all or nothing. */
const VERSION = 3;

/** A version 3 row. */
interface StoredRow {
  /** The collection's `id` times two plus the slot. */
  part: number;
  d: string;
  eventId: string;
  channel: string;
  createdAt: number;
  kind: number;
  type: string | null;
  op: string | null;
  title: string | null;
  content: string;
  author: string;
  /** The event's tags as JSON text, parsed only when `row.event` is read. */
  tags: string;
  sig: string;
}

/** A row of the version 1 and 2 `artifacts` store (read once, by the upgrade). */
interface OldRow {
  key: string;
  slot: Slot;
  d: string;
  eventId: string;
  channel: string;
  createdAt: number;
  kind?: number;
  type?: string | null;
  op?: string | null;
  title?: string | null;
  content?: string;
  author?: string;
  /** JSON text (version 2) or the event itself (version 1 rows). */
  event: string | NostrEvent;
}

interface CollectionRecord {
  key: string;
  state: CollectionState;
  id?: number;
}

const partOf = (id: number, slot: Slot): number => id * 2 + slot;

function storedOf(part: number, row: ArtifactRow): StoredRow {
  const { event } = row;
  return {
    part, d: row.d, eventId: row.eventId, channel: row.channel, createdAt: row.createdAt, kind: row.kind, type: row.type,
    op: row.op, title: row.title, content: row.content, author: row.author, tags: JSON.stringify(event.tags), sig: event.sig,
  };
}

/** The row as queries return it; its event is rebuilt on first use. */
export function rowOfStored(stored: StoredRow): ArtifactRow {
  let event: NostrEvent | undefined;
  return {
    d: stored.d, eventId: stored.eventId, kind: stored.kind, channel: stored.channel, type: stored.type, op: stored.op,
    title: stored.title, content: stored.content, author: stored.author, createdAt: stored.createdAt,
    get event(): NostrEvent {
      event ??= {
        id: stored.eventId, pubkey: stored.author, created_at: stored.createdAt, kind: stored.kind,
        tags: JSON.parse(stored.tags) as string[][], content: stored.content, sig: stored.sig,
      };
      return event;
    },
  };
}

/** A version 1 or 2 row as a row. */
function rowOfOld(old: OldRow): ArtifactRow {
  if (typeof old.event !== "string") return rowOf(old.event);
  return rowOf(JSON.parse(old.event) as NostrEvent);
}

/** The upgrade from version 1 or 2, inside its versionchange transaction: every collection
 * gets its number, every row moves to `rows`, then `artifacts` goes. */
function moveRows(tx: IDBTransaction): void {
  const collections = tx.objectStore("collections");
  const rows = tx.objectStore("rows");
  const ids = new Map<string, number>();
  const numbered = collections.openCursor();
  numbered.onsuccess = () => {
    const at = numbered.result;
    if (at) {
      const record = at.value as CollectionRecord;
      const id = ids.size + 1;
      ids.set(record.key, id);
      at.update({ ...record, id });
      at.continue();
      return;
    }
    const moving = tx.objectStore("artifacts").openCursor();
    moving.onsuccess = () => {
      const row = moving.result;
      if (!row) {
        tx.db.deleteObjectStore("artifacts");
        return;
      }
      const old = row.value as OldRow;
      let id = ids.get(old.key);
      if (id === undefined) {
        // Rows without a collection record (never written so): kept, under an empty state.
        id = ids.size + 1;
        ids.set(old.key, id);
        collections.put({ key: old.key, state: emptyState(), id });
      }
      rows.put(storedOf(partOf(id, old.slot), rowOfOld(old)));
      row.continue();
    };
  };
}

function request<T>(req: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

function done(tx: IDBTransaction): Promise<void> {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error ?? new Error("IndexedDB transaction aborted"));
  });
}


export class IndexedDbStore implements Store {
  private readonly db: IDBDatabase;
  private readonly keyRange: typeof IDBKeyRange;
  /** Per collection, the rows of a full round being staged while its live slot is empty (a
   * first sync), as this store wrote them: when the round goes live they are its changes, and
   * every subscription takes them from here instead of reading the whole collection back (the
   * first sync's last step: 250-450 ms for 10,000 rows on the page). Kept only while each page
   * of the round went through this object (`version`: the state it left). */
  private readonly staged = new Map<string, { part: number; version: number; rows: Map<string, ArtifactRow> }>();

  private constructor(db: IDBDatabase, keyRange: typeof IDBKeyRange) {
    this.db = db;
    this.keyRange = keyRange;
  }

  /** Opens (creating) the database `name`; `factory` and `keyRange` default to the browser's
   * `indexedDB` and `IDBKeyRange` (a test passes fake-indexeddb's). */
  static async open(name = "buzz-sync", factory: IDBFactory = globalThis.indexedDB, keyRange: typeof IDBKeyRange = globalThis.IDBKeyRange): Promise<IndexedDbStore> {
    const req = factory.open(name, VERSION);
    req.onupgradeneeded = (event) => {
      const db = req.result;
      const tx = req.transaction!;
      if (event.oldVersion < 1) {
        db.createObjectStore("collections", { keyPath: "key" });
        db.createObjectStore("outbox", { keyPath: "id", autoIncrement: true }).createIndex("key", "key");
        db.createObjectStore("meta", { keyPath: "name" });
      }
      if (event.oldVersion < 3) {
        tx.objectStore("collections").createIndex("id", "id", { unique: true });
        const rows = db.createObjectStore("rows", { keyPath: ["part", "d"] });
        rows.createIndex("channel", ["part", "channel"]);
        rows.createIndex("modified", ["part", "createdAt"]);
        if (event.oldVersion >= 1) moveRows(tx);
      }
    };
    return new IndexedDbStore(await request(req), keyRange);
  }

  private partRange(part: number): IDBKeyRange {
    return this.keyRange.bound([part, ""], [part, "\uffff"]);
  }

  private async readRecord(store: IDBObjectStore, key: string): Promise<CollectionRecord> {
    const found = (await request(store.get(key))) as CollectionRecord | undefined;
    return found ?? { key, state: emptyState() };
  }

  /** The collection's number, given to it (the next after the highest) when it first writes. */
  private async numbered(store: IDBObjectStore, record: CollectionRecord): Promise<number> {
    if (record.id !== undefined) return record.id;
    const last = await request(store.index("id").openKeyCursor(null, "prev"));
    return last ? (last.key as number) + 1 : 1;
  }

  async open(key: string): Promise<CollectionState> {
    return this.state(key);
  }

  async state(key: string): Promise<CollectionState> {
    const tx = this.db.transaction("collections", "readonly");
    return (await this.readRecord(tx.objectStore("collections"), key)).state;
  }

  async applyPage(key: string, plan: PagePlan): Promise<AppliedPage> {
    const tx = this.db.transaction(["collections", "rows"], "readwrite");
    const finished = done(tx);
    const collections = tx.objectStore("collections");
    const artifacts = tx.objectStore("rows");
    let result: AppliedPage;
    let mirror: Map<string, ArtifactRow> | null = null;
    let stagedPart = 0;
    try {
      const record = await this.readRecord(collections, key);
      const before = record.state;
      checkVersion(before, plan);
      const id = await this.numbered(collections, record);
      const slot = plan.target;
      const live = before.liveSlot;
      const part = partOf(id, slot);
      // A staged full round's slot: its changes are not reported, so only what decides an
      // outcome is read (markers' heads, removed channels' rows), not every event's head.
      const counted = slot === live;
      const { page } = plan;
      const held = this.staged.get(key);
      this.staged.delete(key); // set again below once this page has committed
      stagedPart = part;
      if (!counted && plan.clearTarget) {
        const liveRows = await request(artifacts.count(this.partRange(partOf(id, live))));
        if (liveRows === 0) mirror = new Map();
      } else if (!counted && held?.part === part && held.version === before.version) {
        mirror = held.rows;
      }
      if (plan.clearTarget) artifacts.delete(this.partRange(part));
      // What applying reads, read first: heads of every d the page names, rows of removed channels.
      const heads = new Map<string, string>();
      const byChannel = new Map<string, string[]>();
      if (!plan.clearTarget) {
        const named = counted
          ? [...page.events.map((r) => r.d), ...page.markers.map((m) => m.d), ...page.removed.map((r) => r.d)]
          : page.markers.map((m) => m.d);
        const found = await Promise.all(named.map((d) => request(artifacts.get([part, d])) as Promise<StoredRow | undefined>));
        for (const row of found) if (row) heads.set(row.d, row.eventId);
        for (const channel of page.removedChannels) {
          const rows = (await request(artifacts.index("channel").getAll([part, channel]))) as StoredRow[];
          byChannel.set(channel, rows.map((row) => row.d));
          for (const row of rows) heads.set(row.d, row.eventId);
        }
      }
      let changes: LiveChanges = applyEntries(
        {
          deleteChannel: (channel) => {
            let n = 0;
            for (const d of byChannel.get(channel) ?? []) {
              if (heads.delete(d)) {
                artifacts.delete([part, d]);
                mirror?.delete(d);
                n += 1;
              }
            }
            return n;
          },
          deleteD: (d) => {
            // Uncounted, heads were not read: delete whatever is there.
            if (!heads.delete(d) && counted) return false;
            artifacts.delete([part, d]);
            mirror?.delete(d);
            return true;
          },
          headOf: (d) => heads.get(d),
          put: (row) => {
            heads.set(row.d, row.eventId);
            artifacts.put(storedOf(part, row));
            mirror?.set(row.d, row);
          },
        },
        page,
        counted,
      );
      if (slot !== live) {
        changes = noChanges();
        if (plan.swap) {
          const livePart = partOf(id, live);
          const oldCount = await request(artifacts.count(this.partRange(livePart)));
          if (oldCount === 0) {
            const added = await request(artifacts.count(this.partRange(part)));
            // The staged rows, when this object saw the whole round (their count agrees); else re-read.
            const whole = mirror !== null && mirror.size === added;
            changes = { ...noChanges(), added, upserted: whole ? [...mirror!.values()] : null, deleted: whole ? [] : null };
          } else {
            const [oldRows, newRows] = (await Promise.all([
              request(artifacts.getAll(this.partRange(livePart))),
              request(artifacts.getAll(this.partRange(part))),
            ])) as [StoredRow[], StoredRow[]];
            changes = swapChanges(new Map(oldRows.map((r) => [r.d, r.eventId])), newRows.map((r) => [r.d, r.eventId] as [string, string]));
            artifacts.delete(this.partRange(livePart));
          }
        }
      }
      const after = stateAfter(before, plan);
      collections.put({ key, state: after, id } satisfies CollectionRecord);
      // Nothing more is asked of the transaction: commit now rather than when this thread has
      // taken the last put's success event and turned its event loop (IndexedDB's auto-commit),
      // so the storage process starts the commit as soon as it has the writes.
      tx.commit?.();
      result = { state: after, changes };
    } catch (error) {
      try {
        tx.abort();
      } catch {
        // already finished
      }
      await finished.catch(() => undefined);
      throw error;
    }
    await finished;
    if (mirror !== null && !plan.swap) this.staged.set(key, { part: stagedPart, version: result.state.version, rows: mirror });
    return result;
  }

  /** The live slot's part, or null for a collection that never wrote a page (no rows). */
  private async livePart(tx: IDBTransaction, key: string): Promise<number | null> {
    const record = await this.readRecord(tx.objectStore("collections"), key);
    return record.id === undefined ? null : partOf(record.id, record.state.liveSlot);
  }

  async get(key: string, d: string): Promise<ArtifactRow | undefined> {
    const tx = this.db.transaction(["collections", "rows"], "readonly");
    const part = await this.livePart(tx, key);
    if (part === null) return undefined;
    const row = (await request(tx.objectStore("rows").get([part, d]))) as StoredRow | undefined;
    return row ? rowOfStored(row) : undefined;
  }

  async query(key: string, query: CollectionQuery): Promise<ArtifactRow[]> {
    const tx = this.db.transaction(["collections", "rows"], "readonly");
    const part = await this.livePart(tx, key);
    if (part === null) return [];
    const artifacts = tx.objectStore("rows");
    // Newest first with a limit: a cursor over the modification index. With a channel, that
    // channel's rows are fewer than a cursor might walk past to find them: its index instead.
    if (query.limit !== undefined && query.orderBy !== "title" && query.channel === undefined) {
      return this.newest(artifacts, part, query);
    }
    let stored: StoredRow[];
    if (query.channel !== undefined) {
      const channels = typeof query.channel === "string" ? [query.channel] : [...query.channel];
      const parts = await Promise.all(channels.map((channel) => request(artifacts.index("channel").getAll([part, channel])) as Promise<StoredRow[]>));
      stored = parts.flat();
    } else {
      stored = (await request(artifacts.getAll(this.partRange(part)))) as StoredRow[];
    }
    return runQuery(stored.map(rowOfStored), query);
  }

  /** The newest `limit` matching rows from a cursor over the `modified` index (newest first),
   * stopping once it has them: a first screenful costs that screenful, not the collection. Rows
   * modified in the same second as the last one taken are read too, so that ties are ordered by
   * `d` exactly as `compareRows` orders them. */
  private newest(artifacts: IDBObjectStore, part: number, query: CollectionQuery): Promise<ArtifactRow[]> {
    const limit = Math.max(0, Math.floor(query.limit ?? 0));
    const range = this.keyRange.bound([part, -Infinity], [part, Infinity]);
    const found: ArtifactRow[] = [];
    return new Promise((resolve, reject) => {
      if (limit === 0) return resolve([]);
      const cursor = artifacts.index("modified").openCursor(range, "prev");
      cursor.onerror = () => reject(cursor.error);
      cursor.onsuccess = () => {
        const at = cursor.result;
        const last = found.at(-1);
        if (!at || (found.length >= limit && (at.value as StoredRow).createdAt !== last!.createdAt)) {
          resolve(runQuery(found, query));
          return;
        }
        const row = rowOfStored(at.value as StoredRow);
        if (matches(row, query)) found.push(row);
        at.continue();
      };
    });
  }

  async count(key: string): Promise<number> {
    const tx = this.db.transaction(["collections", "rows"], "readonly");
    const part = await this.livePart(tx, key);
    return part === null ? 0 : request(tx.objectStore("rows").count(this.partRange(part)));
  }

  async outboxAdd(key: string, event: NostrEvent): Promise<OutboxEntry> {
    const tx = this.db.transaction("outbox", "readwrite");
    const queuedAt = Date.now();
    const id = (await request(tx.objectStore("outbox").add({ key, event, queuedAt }))) as number;
    await done(tx);
    return { id, event, queuedAt };
  }

  async outboxList(key: string): Promise<OutboxEntry[]> {
    const tx = this.db.transaction("outbox", "readonly");
    const rows = (await request(tx.objectStore("outbox").index("key").getAll(key))) as OutboxEntry[];
    return rows.sort((a, b) => a.id - b.id).map(({ id, event, queuedAt }) => ({ id, event, queuedAt }));
  }

  async outboxRemove(key: string, id: number): Promise<void> {
    const tx = this.db.transaction("outbox", "readwrite");
    tx.objectStore("outbox").delete(id);
    await done(tx);
  }

  async getMeta(name: string): Promise<string | undefined> {
    const tx = this.db.transaction("meta", "readonly");
    const found = (await request(tx.objectStore("meta").get(name))) as { value: string } | undefined;
    return found?.value;
  }

  async setMeta(name: string, value: string): Promise<void> {
    const tx = this.db.transaction("meta", "readwrite");
    tx.objectStore("meta").put({ name, value });
    await done(tx);
  }

  async close(): Promise<void> {
    this.db.close();
  }
}
