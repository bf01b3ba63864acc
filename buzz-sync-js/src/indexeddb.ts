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
 * read) with the event as JSON text, parsed only when `row.event` is read: reading 10,000 rows
 * then deserializes 10,000 flat records, not 10,000 events with their tag arrays; and a
 * `modified` index serves "newest first" with a limit from a cursor. Version 1 rows are still
 * read (their `event` is an object); rows written from version 2 on are flat. */
const VERSION = 2;

interface StoredRow {
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

function storedOf(key: string, slot: Slot, row: ArtifactRow): StoredRow {
  return {
    key, slot, d: row.d, eventId: row.eventId, channel: row.channel, createdAt: row.createdAt, kind: row.kind, type: row.type,
    op: row.op, title: row.title, content: row.content, author: row.author, event: JSON.stringify(row.event),
  };
}

/** The row as queries return it; a version 2 row's event is parsed on first use. */
export function rowOfStored(stored: StoredRow): ArtifactRow {
  if (typeof stored.event !== "string") return rowOf(stored.event);
  const json = stored.event;
  let event: NostrEvent | undefined;
  return {
    d: stored.d, eventId: stored.eventId, kind: stored.kind ?? 0, channel: stored.channel, type: stored.type ?? null, op: stored.op ?? null,
    title: stored.title ?? null, content: stored.content ?? "", author: stored.author ?? "", createdAt: stored.createdAt,
    get event(): NostrEvent {
      event ??= JSON.parse(json) as NostrEvent;
      return event;
    },
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
      if (event.oldVersion < 1) {
        db.createObjectStore("collections", { keyPath: "key" });
        const artifacts = db.createObjectStore("artifacts", { keyPath: ["key", "slot", "d"] });
        artifacts.createIndex("channel", ["key", "slot", "channel"]);
        db.createObjectStore("outbox", { keyPath: "id", autoIncrement: true }).createIndex("key", "key");
        db.createObjectStore("meta", { keyPath: "name" });
      }
      if (event.oldVersion < 2) req.transaction!.objectStore("artifacts").createIndex("modified", ["key", "slot", "createdAt"]);
    };
    return new IndexedDbStore(await request(req), keyRange);
  }

  private slotRange(key: string, slot: Slot): IDBKeyRange {
    return this.keyRange.bound([key, slot, ""], [key, slot, "\uffff"]);
  }

  private async readState(store: IDBObjectStore, key: string): Promise<CollectionState> {
    const found = (await request(store.get(key))) as { state: CollectionState } | undefined;
    return found?.state ?? emptyState();
  }

  async open(key: string): Promise<CollectionState> {
    return this.state(key);
  }

  async state(key: string): Promise<CollectionState> {
    const tx = this.db.transaction("collections", "readonly");
    return this.readState(tx.objectStore("collections"), key);
  }

  async applyPage(key: string, plan: PagePlan): Promise<AppliedPage> {
    const tx = this.db.transaction(["collections", "artifacts"], "readwrite");
    const finished = done(tx);
    const collections = tx.objectStore("collections");
    const artifacts = tx.objectStore("artifacts");
    let result: AppliedPage;
    try {
      const before = await this.readState(collections, key);
      checkVersion(before, plan);
      const slot = plan.target;
      const live = before.liveSlot;
      // A staged full round's slot: its changes are not reported, so only what decides an
      // outcome is read (markers' heads, removed channels' rows), not every event's head.
      const counted = slot === live;
      const { page } = plan;
      if (plan.clearTarget) artifacts.delete(this.slotRange(key, slot));
      // What applying reads, read first: heads of every d the page names, rows of removed channels.
      const heads = new Map<string, string>();
      const byChannel = new Map<string, string[]>();
      if (!plan.clearTarget) {
        const named = counted
          ? [...page.events.map((r) => r.d), ...page.markers.map((m) => m.d), ...page.removed.map((r) => r.d)]
          : page.markers.map((m) => m.d);
        const found = await Promise.all(named.map((d) => request(artifacts.get([key, slot, d])) as Promise<StoredRow | undefined>));
        for (const row of found) if (row) heads.set(row.d, row.eventId);
        for (const channel of page.removedChannels) {
          const rows = (await request(artifacts.index("channel").getAll([key, slot, channel]))) as StoredRow[];
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
                artifacts.delete([key, slot, d]);
                n += 1;
              }
            }
            return n;
          },
          deleteD: (d) => {
            // Uncounted, heads were not read: delete whatever is there.
            if (!heads.delete(d) && counted) return false;
            artifacts.delete([key, slot, d]);
            return true;
          },
          headOf: (d) => heads.get(d),
          put: (row) => {
            heads.set(row.d, row.eventId);
            artifacts.put(storedOf(key, slot, row));
          },
        },
        page,
        counted,
      );
      if (slot !== live) {
        changes = noChanges();
        if (plan.swap) {
          const oldCount = await request(artifacts.count(this.slotRange(key, live)));
          if (oldCount === 0) {
            changes = { ...noChanges(), added: await request(artifacts.count(this.slotRange(key, slot))), upserted: null, deleted: null };
          } else {
            const [oldRows, newRows] = (await Promise.all([
              request(artifacts.getAll(this.slotRange(key, live))),
              request(artifacts.getAll(this.slotRange(key, slot))),
            ])) as [StoredRow[], StoredRow[]];
            changes = swapChanges(new Map(oldRows.map((r) => [r.d, r.eventId])), newRows.map((r) => [r.d, r.eventId] as [string, string]));
            artifacts.delete(this.slotRange(key, live));
          }
        }
      }
      const after = stateAfter(before, plan);
      collections.put({ key, state: after });
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
    return result;
  }

  async get(key: string, d: string): Promise<ArtifactRow | undefined> {
    const tx = this.db.transaction(["collections", "artifacts"], "readonly");
    const state = await this.readState(tx.objectStore("collections"), key);
    const row = (await request(tx.objectStore("artifacts").get([key, state.liveSlot, d]))) as StoredRow | undefined;
    return row ? rowOfStored(row) : undefined;
  }

  async query(key: string, query: CollectionQuery): Promise<ArtifactRow[]> {
    const tx = this.db.transaction(["collections", "artifacts"], "readonly");
    const state = await this.readState(tx.objectStore("collections"), key);
    const artifacts = tx.objectStore("artifacts");
    // Newest first with a limit: a cursor over the modification index. With a channel, that
    // channel's rows are fewer than a cursor might walk past to find them: its index instead.
    if (query.limit !== undefined && query.orderBy !== "title" && query.channel === undefined) {
      return this.newest(artifacts, key, state.liveSlot, query);
    }
    let stored: StoredRow[];
    if (query.channel !== undefined) {
      const channels = typeof query.channel === "string" ? [query.channel] : [...query.channel];
      const parts = await Promise.all(channels.map((channel) => request(artifacts.index("channel").getAll([key, state.liveSlot, channel])) as Promise<StoredRow[]>));
      stored = parts.flat();
    } else {
      stored = (await request(artifacts.getAll(this.slotRange(key, state.liveSlot)))) as StoredRow[];
    }
    return runQuery(stored.map(rowOfStored), query);
  }

  /** The newest `limit` matching rows from a cursor over the `modified` index (newest first),
   * stopping once it has them: a first screenful costs that screenful, not the collection. Rows
   * modified in the same second as the last one taken are read too, so that ties are ordered by
   * `d` exactly as `compareRows` orders them. */
  private newest(artifacts: IDBObjectStore, key: string, slot: Slot, query: CollectionQuery): Promise<ArtifactRow[]> {
    const limit = Math.max(0, Math.floor(query.limit ?? 0));
    const range = this.keyRange.bound([key, slot, -Infinity], [key, slot, Infinity]);
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
    const tx = this.db.transaction(["collections", "artifacts"], "readonly");
    const state = await this.readState(tx.objectStore("collections"), key);
    return request(tx.objectStore("artifacts").count(this.slotRange(key, state.liveSlot)));
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
