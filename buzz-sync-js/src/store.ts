/**
 * Storage behind one interface: memory (tests, short-lived tools), SQLite (Node, `./sqlite`),
 * IndexedDB (browsers). Every adapter applies a page and its progress token in ONE transaction,
 * so a crash or a closed tab never leaves a token ahead of its items.
 *
 * Full rounds are staged, as buzz-sync does: each collection has two slots; `liveSlot` is the
 * one queries see. A page that starts a full round (`reset: true`, or the answer to
 * `progress: null`) empties the other slot and the round fills it; its last page (`more:
 * false`) makes it live and drops the old one. That is PROTOCOL.md's "empty the collection
 * first", done so that an app never shows a half-filled collection, and an interrupted full
 * round leaves the previous complete collection in place.
 */

import type { ArtifactRow, CollectionQuery, NostrEvent } from "./types.js";
import { runQuery } from "./types.js";
import type { Page } from "./page.js";
import { BuzzError } from "./errors.js";

export type Slot = 0 | 1;

export interface CollectionState {
  version: number;
  liveSlot: Slot;
  /** Token of the last applied page. */
  progress: string | null;
  /** That page said `more: true`. */
  roundOpen: boolean;
  /** Where the open round's pages go. */
  targetSlot: Slot | null;
  /** The token came while the relay advertised `artifacts.incremental`. */
  continuable: boolean;
  /** The live slot holds a finished round. */
  complete: boolean;
  rounds: number;
}

export const emptyState = (): CollectionState => ({
  version: 0, liveSlot: 0, progress: null, roundOpen: false, targetSlot: null, continuable: false, complete: false, rounds: 0,
});

/** What one applied page does, decided by the sync engine (one definition for every adapter). */
export interface PagePlan {
  expectedVersion: number;
  target: Slot;
  /** The page starts a full round: empty `target` first. */
  clearTarget: boolean;
  page: Page;
  continuable: boolean;
  /** The page ends a staged full round: `target` becomes live, the old slot is dropped. */
  swap: boolean;
}

/** What changed in the LIVE collection. */
export interface LiveChanges {
  added: number;
  updated: number;
  removed: number;
  /** Rows written to the live slot and `d`s deleted from it; `null` after a swap (re-read). */
  upserted: ArtifactRow[] | null;
  deleted: string[] | null;
}

export interface AppliedPage {
  state: CollectionState;
  changes: LiveChanges;
}

/** An event waiting to be sent, in the order it was made. */
export interface OutboxEntry {
  id: number;
  event: NostrEvent;
  queuedAt: number;
}

export interface Store {
  /** `applyPage` writes on the calling thread before it returns (better-sqlite3, memory): a
   * round then writes a checked page while the verify worker checks the next one. Absent
   * (IndexedDB, whose commits run in the browser's storage process): each page is handed to
   * the store as soon as it is checked, so that its commit starts as early as it can. */
  readonly writesOnCallingThread?: boolean;
  /** The collection's state, created empty on first use. `key` names (relay, community,
   * reader, filter). */
  open(key: string): Promise<CollectionState>;
  state(key: string): Promise<CollectionState>;
  /** Applies a page and its token in one transaction; `concurrent_sync` (nothing applied) if
   * another writer applied a page since `plan.expectedVersion`. */
  applyPage(key: string, plan: PagePlan): Promise<AppliedPage>;
  get(key: string, d: string): Promise<ArtifactRow | undefined>;
  query(key: string, query: CollectionQuery): Promise<ArtifactRow[]>;
  count(key: string): Promise<number>;
  outboxAdd(key: string, event: NostrEvent): Promise<OutboxEntry>;
  outboxList(key: string): Promise<OutboxEntry[]>;
  outboxRemove(key: string, id: number): Promise<void>;
  getMeta(name: string): Promise<string | undefined>;
  setMeta(name: string, value: string): Promise<void>;
  close(): Promise<void>;
}

export const noChanges = (): LiveChanges => ({ added: 0, updated: 0, removed: 0, upserted: [], deleted: [] });

/**
 * The page applied to one slot through four primitives, so that every adapter runs the same
 * order of operations: removed channels first (by each item's STORED home, even one that has
 * moved since: a page re-delivers it), then removals by `d`, markers (only while our head is
 * the marker's `prev`), then upserts.
 */
export interface SlotOps {
  deleteChannel(channel: string): number;
  deleteD(d: string): boolean;
  headOf(d: string): string | undefined;
  put(row: ArtifactRow): void;
}

/** Synchronous on purpose: better-sqlite3 transactions cannot span an await, and IndexedDB
 * reads what it needs first (tx-bound requests queue in order).
 *
 * `counted: false` when the slot is a staged full round's (not live): what changed there is
 * never reported, so an event is written without first reading the head it replaces (half of
 * the storage requests of an initial sync) and a removed `d` is deleted without asking whether
 * it is there. Markers still compare heads: that decides whether they delete. */
export function applyEntries(ops: SlotOps, page: Page, counted = true): LiveChanges {
  const changes = noChanges();
  for (const channel of page.removedChannels) {
    changes.removed += ops.deleteChannel(channel);
    changes.upserted = null; // which d's left is not known row by row: subscribers re-read
    changes.deleted = null;
  }
  const deleted = (d: string): void => {
    changes.removed += 1;
    changes.deleted?.push(d);
  };
  for (const { d } of page.removed) if (ops.deleteD(d)) deleted(d);
  for (const marker of page.markers) {
    if ((ops.headOf(marker.d)) === (marker.prev ?? "") && (ops.deleteD(marker.d))) deleted(marker.d);
  }
  for (const row of page.events) {
    const known = counted ? ops.headOf(row.d) : undefined;
    if (known === undefined) changes.added += 1;
    else if (known !== row.eventId) changes.updated += 1;
    ops.put(row);
    changes.upserted?.push(row);
  }
  return changes;
}

/** The state after a page (one definition for every adapter). */
export function stateAfter(before: CollectionState, plan: PagePlan): CollectionState {
  const { page } = plan;
  if (page.more) {
    return { ...before, version: before.version + 1, progress: page.progress, roundOpen: true, targetSlot: plan.target, continuable: plan.continuable };
  }
  return {
    ...before, version: before.version + 1, progress: page.progress, roundOpen: false, targetSlot: null,
    continuable: plan.continuable, liveSlot: plan.target, complete: true, rounds: before.rounds + 1,
  };
}

export function checkVersion(state: CollectionState, plan: PagePlan): void {
  if (state.version !== plan.expectedVersion) {
    throw new BuzzError("concurrent_sync", "another tab or process is syncing this collection; try again");
  }
}

/** Counts what a finished staged round changed against the old live slot. */
export function swapChanges(oldRows: Map<string, string>, newRows: Iterable<[string, string]>): LiveChanges {
  let added = 0, updated = 0, kept = 0;
  for (const [d, id] of newRows) {
    const old = oldRows.get(d);
    if (old === undefined) added += 1;
    else {
      kept += 1;
      if (old !== id) updated += 1;
    }
  }
  return { added, updated, removed: oldRows.size - kept, upserted: null, deleted: null };
}

interface MemoryCollection {
  state: CollectionState;
  slots: [Map<string, ArtifactRow>, Map<string, ArtifactRow>];
  outbox: OutboxEntry[];
}

/** Everything in memory: for tests and tools that sync from scratch each run. */
export class MemoryStore implements Store {
  readonly writesOnCallingThread = true;
  private readonly collections = new Map<string, MemoryCollection>();
  private readonly meta = new Map<string, string>();
  private nextOutboxId = 1;

  private collection(key: string): MemoryCollection {
    let found = this.collections.get(key);
    if (!found) {
      found = { state: emptyState(), slots: [new Map(), new Map()], outbox: [] };
      this.collections.set(key, found);
    }
    return found;
  }

  async open(key: string): Promise<CollectionState> {
    return { ...this.collection(key).state };
  }

  async state(key: string): Promise<CollectionState> {
    return this.open(key);
  }

  async applyPage(key: string, plan: PagePlan): Promise<AppliedPage> {
    const c = this.collection(key);
    checkVersion(c.state, plan);
    // All or nothing, like a transaction: every overwritten entry is remembered and put back
    // if applying fails half-way.
    const target = plan.clearTarget ? new Map<string, ArtifactRow>() : c.slots[plan.target];
    const undo = new Map<string, ArtifactRow | undefined>();
    const remember = (d: string): void => {
      if (!undo.has(d)) undo.set(d, target.get(d));
    };
    let changes: LiveChanges;
    try {
      changes = applyEntries(
        {
          deleteChannel: (channel) => {
            let n = 0;
            for (const [d, row] of target) {
              if (row.channel === channel) {
                remember(d);
                target.delete(d);
                n += 1;
              }
            }
            return n;
          },
          deleteD: (d) => {
            remember(d);
            return target.delete(d);
          },
          headOf: (d) => target.get(d)?.eventId,
          put: (row) => {
            remember(row.d);
            target.set(row.d, row);
          },
        },
        plan.page,
      );
    } catch (error) {
      for (const [d, row] of undo) {
        if (row === undefined) target.delete(d);
        else target.set(d, row);
      }
      throw error;
    }
    const live = c.state.liveSlot;
    if (plan.target !== live) {
      changes = noChanges();
      if (plan.swap) {
        const old = new Map([...c.slots[live]].map(([d, row]) => [d, row.eventId] as [string, string]));
        changes = swapChanges(old, [...target].map(([d, row]) => [d, row.eventId] as [string, string]));
        c.slots[live] = new Map();
      }
    }
    c.slots[plan.target] = target;
    c.state = stateAfter(c.state, plan);
    return { state: { ...c.state }, changes };
  }

  async get(key: string, d: string): Promise<ArtifactRow | undefined> {
    const c = this.collection(key);
    return c.slots[c.state.liveSlot].get(d);
  }

  async query(key: string, query: CollectionQuery): Promise<ArtifactRow[]> {
    const c = this.collection(key);
    return runQuery(c.slots[c.state.liveSlot].values(), query);
  }

  async count(key: string): Promise<number> {
    const c = this.collection(key);
    return c.slots[c.state.liveSlot].size;
  }

  async outboxAdd(key: string, event: NostrEvent): Promise<OutboxEntry> {
    const entry = { id: this.nextOutboxId++, event, queuedAt: Date.now() };
    this.collection(key).outbox.push(entry);
    return entry;
  }

  async outboxList(key: string): Promise<OutboxEntry[]> {
    return [...this.collection(key).outbox];
  }

  async outboxRemove(key: string, id: number): Promise<void> {
    const c = this.collection(key);
    c.outbox = c.outbox.filter((entry) => entry.id !== id);
  }

  async getMeta(name: string): Promise<string | undefined> {
    return this.meta.get(name);
  }

  async setMeta(name: string, value: string): Promise<void> {
    this.meta.set(name, value);
  }

  async close(): Promise<void> {}
}
