/**
 * Rounds (PROTOCOL.md section 5): fetch pages from `POST /query` and apply each, with its token,
 * to the local collection. The same rules as buzz-sync (buzzclient/sync.py):
 *
 * - the relay advertises `artifacts.incremental` and the last round finished under it: a
 *   continuation round from the stored token;
 * - a round was interrupted while the capability is advertised: it resumes from the token of
 *   its last applied page (and, since that round keeps its first page's T, the caller runs one
 *   more round before counting the collection current);
 * - otherwise (first run, capability absent, token refused): a full round from `progress: null`.
 */

import { BuzzError } from "./errors.js";
import { forged, type Page, pageItems, parsePage, servedEvents, useWasmVerifier, verifyEvents } from "./page.js";
import { answerText, type RelayHttp, type RelayInfo } from "./relay.js";
import type { AppliedPage, CollectionState, LiveChanges, Store } from "./store.js";
import { isUuid } from "./types.js";
import { VerifierWorker, type VerifyWorkerLike } from "./verify-pool.js";

export interface SyncFilter {
  /** Home channels (`#h`); empty: every channel the reader can read. */
  channels?: readonly string[];
  /** Artifact types (`#type`). */
  types?: readonly string[];
}

/** Sorted and de-duplicated, as the relay canonicalizes them (tokens bind this). */
export function predicates(filter: SyncFilter): Record<string, string[]> {
  const found: Record<string, string[]> = {};
  for (const channel of filter.channels ?? []) {
    if (!isUuid(channel)) throw new BuzzError("bad_input", `channel ${JSON.stringify(channel)} is not a lowercase canonical UUID`);
  }
  for (const type of filter.types ?? []) {
    if (typeof type !== "string" || !type) throw new BuzzError("bad_input", "an artifact type must be a non-empty string");
  }
  if (filter.channels?.length) found["#h"] = [...new Set(filter.channels)].sort();
  if (filter.types?.length) found["#type"] = [...new Set(filter.types)].sort();
  return found;
}

export interface RoundSummary {
  kind: "full" | "continuation";
  /** The relay advertised `artifacts.incremental` when the round started. */
  incremental: boolean;
  pages: number;
  /** Events and removals received (overlap re-reads included). */
  items: number;
  added: number;
  updated: number;
  removed: number;
  /** Pages that reset a round the client did not start as a full round. */
  resets: number;
  /** The round was begun earlier (interrupted) and finished now. */
  resumed: boolean;
  seconds: number;
  /** Seconds spent honouring 429 / backing off from 503. */
  waited: number;
}

/** What a round reports after each applied page. */
export interface PageProgress {
  summary: RoundSummary;
  changes: LiveChanges;
  page: Page;
  state: CollectionState;
}

export type ViewChanges = "auto" | "reset";

export interface SyncerOptions {
  http: RelayHttp;
  store: Store;
  /** The collection's key in the store. */
  key: string;
  filter?: SyncFilter;
  pageLimit?: number;
  /** Check every served event's id and signature (default true). */
  verify?: boolean;
  /** `auto`: opt in to `view_changes: "incremental"` when NIP-11 offers it (as buzz-sync does);
   * `reset`: never (every view change resets the collection). */
  viewChanges?: ViewChanges;
  /** Verify with libsecp256k1 in WebAssembly when it loads (default true); false: noble. */
  wasmVerifier?: boolean;
  /** Browsers: check a page's signatures in a Web Worker running the package's
   * `verify-worker` script (e.g. `() => new Worker(new URL("./verify-worker.js",
   * import.meta.url), { type: "module" })`), so that they are checked while the page before is
   * written. Node: `nodeVerifyWorker` (`buzz-sync-js/node`), a worker thread doing the same
   * beside the SQLite writes. Without it, or when the worker cannot check, they are checked on
   * this thread. */
  verifyWorker?: () => VerifyWorkerLike;
}

export class Syncer {
  readonly http: RelayHttp;
  readonly store: Store;
  readonly key: string;
  readonly filter: Record<string, string[]>;
  readonly pageLimit?: number;
  readonly verify: boolean;
  readonly viewChanges: ViewChanges;
  readonly wasmVerifier: boolean;
  private readonly verifyWorker?: () => VerifyWorkerLike;
  private checker: VerifierWorker | null | undefined;

  constructor(options: SyncerOptions) {
    this.http = options.http;
    this.store = options.store;
    this.key = options.key;
    this.filter = predicates(options.filter ?? {});
    if (options.pageLimit !== undefined && !(Number.isInteger(options.pageLimit) && options.pageLimit >= 1 && options.pageLimit <= 1000)) {
      throw new BuzzError("bad_input", "page limit must be between 1 and 1000");
    }
    this.pageLimit = options.pageLimit;
    this.verify = options.verify ?? true;
    this.viewChanges = options.viewChanges ?? "auto";
    this.wasmVerifier = options.wasmVerifier ?? true;
    this.verifyWorker = options.verifyWorker;
  }

  /** Ends the verifying worker, if one was started (the next round would start another). */
  close(): void {
    this.checker?.terminate();
    this.checker = undefined;
  }

  async relayInfo(): Promise<RelayInfo> {
    return this.http.relayInfo();
  }

  /** Fetches and applies pages until the relay says `more: false`. `maxPages` stops early
   * (the round stays open and the next call resumes it). */
  async runRound(options: { info?: RelayInfo; onPage?: (progress: PageProgress) => void; maxPages?: number } = {}): Promise<RoundSummary> {
    // The verifier (and the worker, which loads its own) start before NIP-11 is asked for: they
    // get ready while the relay answers.
    const verifierReady = this.verify && this.wasmVerifier ? useWasmVerifier() : null;
    if (this.checker === undefined) {
      try {
        this.checker = this.verify && this.wasmVerifier && this.verifyWorker ? new VerifierWorker(this.verifyWorker()) : null;
      } catch {
        this.checker = null; // no worker here (or the page's CSP refuses it): this thread checks
      }
    }
    const checker = this.checker;
    const info = options.info ?? (await this.relayInfo());
    await verifierReady;
    const started = performance.now();
    const waitedBefore = this.http.stats.waited;
    const state = await this.store.state(this.key);
    let version = state.version;
    // Only tokens obtained while the capability was advertised are ever sent again, be they a
    // finished round's (continuation) or an interrupted round's (resumption).
    const resumable = state.continuable && (state.roundOpen || state.complete);
    let progress: string | null = null;
    let kind: RoundSummary["kind"] = "full";
    if (info.incremental && resumable && state.progress !== null) {
      progress = state.progress;
      kind = state.roundOpen && state.targetSlot !== state.liveSlot ? "full" : "continuation";
    }
    const summary: RoundSummary = {
      kind, incremental: info.incremental, pages: 0, items: 0, added: 0, updated: 0, removed: 0,
      resets: 0, resumed: progress !== null && state.roundOpen, seconds: 0, waited: 0,
    };
    let tokenRefused = false;
    let liveSlot = state.liveSlot;
    let roundOpen = state.roundOpen;
    let targetSlot = state.targetSlot;
    // The next page is asked for as soon as this one's token is known, before this one is
    // checked and applied: the relay serves it while we verify signatures and write. Nothing of
    // it is used unless this page was applied (a page that fails its checks ends the round, and
    // the request's answer is dropped).
    let prefetched: { answer: Promise<unknown>; arrived: boolean } | null = null;
    // A page's transaction is committing (IndexedDB commits off the page's thread) while the
    // next page is parsed and its signatures checked; it is awaited before the next is applied,
    // and before the round ends or fails, so pages are still applied one at a time, in order.
    let applying: { result: Promise<AppliedPage>; page: Page } | null = null;
    const settle = async (): Promise<void> => {
      if (applying === null) return;
      const { result, page } = applying;
      applying = null;
      const applied = await result;
      if (page.reset && progress !== null) {
        summary.resets += 1;
        summary.kind = "full";
      }
      version = applied.state.version;
      liveSlot = applied.state.liveSlot;
      roundOpen = applied.state.roundOpen;
      targetSlot = applied.state.targetSlot;
      progress = page.progress;
      summary.pages += 1;
      summary.items += pageItems(page);
      summary.added += applied.changes.added;
      summary.updated += applied.changes.updated;
      summary.removed += applied.changes.removed;
      summary.seconds = (performance.now() - started) / 1000;
      summary.waited = this.http.stats.waited - waitedBefore;
      options.onPage?.({ summary, changes: applied.changes, page, state: applied.state });
    };
    // A page whose checks passed when the next page has already arrived waits here until that
    // page's signatures are handed to the worker, and is applied then: the worker checks page
    // N+1 while this thread writes page N (SQLite writes run on this thread, synchronously, so
    // applying page N at once would leave the worker idle during the write and this thread idle
    // during the check). Without a worker there is nothing to overlap with, and a page is
    // applied as soon as it is checked; so it is for a store that commits elsewhere
    // (IndexedDB: `Store.writesOnCallingThread`), whose commits should start as early as they can.
    let checkedPage: Page | null = null;
    const apply = async (): Promise<void> => {
      if (checkedPage === null) return;
      const page = checkedPage;
      checkedPage = null;
      await settle(); // the page before's state decides this one's plan
      const startsFull = progress === null || page.reset;
      let target = liveSlot;
      if (startsFull) target = (1 - liveSlot) as 0 | 1;
      else if (roundOpen && targetSlot !== null) target = targetSlot;
      applying = {
        page,
        result: this.store.applyPage(this.key, {
          expectedVersion: version,
          target,
          clearTarget: startsFull,
          page,
          continuable: info.incremental,
          swap: !page.more && target !== liveSlot,
        }),
      };
      applying.result.catch(() => undefined); // surfaces in settle(); never an unhandled rejection
    };
    const maxPages = options.maxPages ?? Infinity;
    try {
      for (let n = 0; n < maxPages; n += 1) {
        let body: unknown;
        try {
          const ahead = prefetched;
          prefetched = null;
          body = await (ahead?.answer ?? this.fetch(info, progress));
        } catch (error) {
          // The pages before are applied and reported first, as they would have been.
          await apply();
          await settle();
          if (!(error instanceof BuzzError) || error.relayCode !== "invalid_progress" || progress === null || tokenRefused) throw error;
          // The relay cannot read our token (its key changed beyond rotation, or storage was
          // edited): start over with a full round rather than give up.
          tokenRefused = true;
          progress = null;
          summary.kind = "full";
          summary.resets += 1;
          continue;
        }
        const next = (body as { progress?: unknown; more?: unknown } | null) ?? {};
        if (next.more === true && typeof next.progress === "string" && next.progress && n + 1 < maxPages) {
          const ahead = { answer: this.fetch(info, next.progress), arrived: false };
          // Surfaces when awaited; never an unhandled rejection.
          ahead.answer.then(() => (ahead.arrived = true), () => (ahead.arrived = true));
          prefetched = ahead;
        }
        let page: Page;
        let checked: Promise<number | null> | null = null;
        try {
          page = parsePage(body, this.verify && checker === null);
          // The page's text when we have it: one string to copy, not every event object.
          if (this.verify && checker !== null) checked = checker.check(answerText(body) ?? servedEvents(body));
        } catch (error) {
          await apply();
          await settle();
          throw error;
        }
        await apply(); // the page before, while the worker checks this one
        if (checked !== null) {
          let bad: number | null;
          try {
            bad = await checked;
            if (bad === null) verifyEvents(servedEvents(body));
            else if (bad >= 0) throw forged(servedEvents(body)[bad]);
          } catch (error) {
            await settle();
            throw error;
          }
        }
        checkedPage = page;
        // Kept for the next page's check only when that page is already here (while the relay
        // is still serving it this thread would wait idle, so the page is written now), and
        // only for a store that writes on this thread.
        const keep = checked !== null && page.more && prefetched !== null && prefetched.arrived && this.store.writesOnCallingThread === true;
        if (!keep) await apply();
        if (!page.more) break;
      }
      await apply();
      await settle();
    } finally {
      // A round that fails (a later page's checks, the network) still waits for the page
      // already being applied: it is valid, and it commits before the error reaches the caller.
      if (applying !== null) await (applying as { result: Promise<AppliedPage> }).result.catch(() => undefined);
    }
    return summary;
  }

  private fetch(info: RelayInfo, progress: string | null): Promise<unknown> {
    const request: Record<string, unknown> = { artifact: "current", ...this.filter };
    request.limit = Math.min(this.pageLimit ?? info.maxLimit, info.maxLimit);
    request.progress = progress;
    if (this.viewChanges === "auto" && info.incrementalViewChanges) {
      // Grants and removals then cost the channels they touch, not a full round.
      request.view_changes = "incremental";
    }
    return this.http.query(request, info.queryEndpoint);
  }
}
