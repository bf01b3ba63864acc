/**
 * The app-facing API: one object that keeps a collection current (rounds, live hints,
 * polling), answers queries and subscriptions over it, and publishes with an offline outbox.
 *
 *     const client = await BuzzClient.open({ relay: "https://relay.example", store });
 *     client.subscribe({ type: "buzz.task", orderBy: "modified" }, ({ rows }) => render(rows));
 *     client.start();                         // live stream + polling; runs the first round
 *     await client.firstSync;                 // the collection is complete
 *     await client.createArtifact({ channel, type: "buzz.task", title: "Buy milk" });
 */

import { backoff, defaultRetry, type RetryPolicy } from "./backoff.js";
import { BuzzError } from "./errors.js";
import { LiveHints, type WebSocketFactory } from "./live.js";
import { type Published, Publisher, type Role } from "./publish.js";
import { type HttpTransport, RelayAddress, RelayHttp, type RelayInfo } from "./relay.js";
import { resolveSigner, type Signer } from "./signer.js";
import type { CollectionState, LiveChanges, Store } from "./store.js";
import { type PageProgress, predicates, type RoundSummary, type SyncFilter, Syncer, type ViewChanges } from "./sync.js";
import type { ArtifactRow, CollectionQuery } from "./types.js";
import type { VerifyWorkerLike } from "./verify-pool.js";
import { compareRows, matches } from "./types.js";

export interface BuzzClientOptions {
  /** `http(s)://host[:port]` or `ws(s)://...`: the host names the community. */
  relay: string;
  store: Store;
  /** A signer of your own; otherwise NIP-07 when present, else `secretKey`, else generated. */
  signer?: Signer;
  secretKey?: string | Uint8Array;
  /** Set false to ignore `window.nostr`. */
  useNip07?: boolean;
  filter?: SyncFilter;
  pageLimit?: number;
  verify?: boolean;
  viewChanges?: ViewChanges;
  /** Verify signatures with libsecp256k1 in WebAssembly when it loads (default true). */
  wasmVerifier?: boolean;
  /** A page's signatures are checked in this worker while the page before is written: in a
   * browser a Web Worker running the package's `verify-worker` script (which the app serves);
   * in Node a worker thread (`nodeVerifyWorker`, `buzz-sync-js/node`) by default. `false`:
   * always on the calling thread. See `SyncerOptions.verifyWorker`. */
  verifyWorker?: (() => VerifyWorkerLike) | false;
  /** Follow the live WebSocket when the relay offers `artifacts.sync` (default true). */
  live?: boolean;
  WebSocket?: WebSocketFactory;
  /** Seconds between polls without a live stream (default 30). */
  pollInterval?: number;
  /** Seconds between polls under a live stream, as a safety net (default 300). */
  safetyInterval?: number;
  /** `http` (`POST /event`, the default) or `websocket` (`EVENT` on the live connection when it
   * is open, else HTTP). */
  publishVia?: "http" | "websocket";
  retry?: Partial<RetryPolicy>;
  /** A `fetch` of your own for the relay's HTTP (in Node it replaces the default node:http
   * transport). */
  fetch?: typeof fetch;
  /** How requests go out (`RelayHttp`'s `transport`); default: `nodeTransport` in Node, else
   * `fetch`. */
  transport?: HttpTransport;
  /** Hears the warning about a generated key. */
  warn?: (message: string) => void;
}

/** The package's Node-only module (`buzz-sync-js/node`) when running in Node, else nothing.
 * Its name is kept from bundlers: it imports node:worker_threads and node:http, so a browser
 * build never includes it, and never gets here. */
async function nodeModule(): Promise<typeof import("./node-verify.js") | undefined> {
  const node = (globalThis as { process?: { versions?: { node?: string } } }).process?.versions?.node;
  if (!node || typeof (globalThis as { window?: unknown }).window !== "undefined") return undefined;
  const specifier = "./node-verify.js";
  try {
    return (await import(/* @vite-ignore */ /* webpackIgnore: true */ specifier)) as typeof import("./node-verify.js");
  } catch {
    return undefined; // a bundle for Node without the module beside it: fetch, and this thread checks
  }
}

/** What a subscription hears: the current rows, and what changed since the last call. */
export interface QueryUpdate {
  rows: ArtifactRow[];
  added: ArtifactRow[];
  updated: ArtifactRow[];
  removed: string[];
  /** The whole result was re-read (first call, a finished full round, channels removed). */
  reloaded: boolean;
}

/** Sync progress: items and pages so far in the round under way. */
export interface SyncProgress {
  syncing: boolean;
  round: RoundSummary | null;
  /** Artifacts in the collection (known after each round). */
  total: number | null;
  /** The collection holds a complete round. */
  complete: boolean;
  /** The live stream is connected. */
  live: boolean;
}

type Listener<T> = (value: T) => void;

class Subscription {
  rows = new Map<string, ArtifactRow>();
  constructor(readonly query: CollectionQuery, readonly listener: Listener<QueryUpdate>) {}
  sorted(): ArtifactRow[] {
    const rows = [...this.rows.values()].sort(compareRows(this.query));
    return this.query.limit !== undefined ? rows.slice(0, this.query.limit) : rows;
  }
}

export class BuzzClient {
  readonly address: RelayAddress;
  readonly pubkey: string;
  readonly key: string;
  readonly store: Store;
  readonly http: RelayHttp;
  readonly syncer: Syncer;
  readonly publisher: Publisher;
  readonly signerSource: string;
  /** Resolves when the collection first holds a complete round (at once if it already did). */
  readonly firstSync: Promise<void>;
  private resolveFirstSync!: () => void;
  private readonly options: BuzzClientOptions;
  private readonly subscriptions = new Set<Subscription>();
  private readonly listeners = { progress: new Set<Listener<SyncProgress>>(), error: new Set<Listener<BuzzError>>(), outcome: new Set<Listener<Published>>() };
  private progressState: SyncProgress = { syncing: false, round: null, total: null, complete: false, live: false };
  private live: LiveHints | null = null;
  private running = false;
  private wake: (() => void) | null = null;
  private woken = false;
  private syncing: Promise<RoundSummary[]> | null = null;
  private again = false;
  private readonly retry: RetryPolicy;
  private readonly signer: Signer;

  private constructor(options: BuzzClientOptions, signer: Signer, pubkey: string, source: string, state: CollectionState) {
    this.options = options;
    this.signer = signer;
    this.address = RelayAddress.parse(options.relay);
    this.pubkey = pubkey;
    this.signerSource = source;
    this.store = options.store;
    this.retry = { ...defaultRetry, ...options.retry };
    this.http = new RelayHttp(this.address, signer, { retry: options.retry, fetch: options.fetch, transport: options.transport });
    this.key = JSON.stringify([this.address.baseUrl, this.address.host, pubkey, predicates(options.filter ?? {})]);
    this.syncer = new Syncer({
      http: this.http, store: this.store, key: this.key, filter: options.filter, pageLimit: options.pageLimit,
      verify: options.verify, viewChanges: options.viewChanges, wasmVerifier: options.wasmVerifier,
      verifyWorker: options.verifyWorker || undefined,
    });
    this.publisher = new Publisher({
      http: this.http, store: this.store, key: this.key, signer,
      send: () => (options.publishVia === "websocket" && this.live?.connected ? (event) => this.live!.publish(event) : null),
      online: () => (typeof navigator !== "undefined" && "onLine" in navigator ? navigator.onLine : true),
      onOutcome: (outcome) => {
        for (const listener of this.listeners.outcome) listener(outcome);
        if (outcome.status === "accepted") this.requestRound();
      },
    });
    this.firstSync = new Promise((resolve) => (this.resolveFirstSync = resolve));
    this.progressState.complete = state.complete;
    if (state.complete) this.resolveFirstSync();
  }

  static async open(options: BuzzClientOptions): Promise<BuzzClient> {
    const choice = await resolveSigner({ signer: options.signer, secretKey: options.secretKey, storage: options.store, useNip07: options.useNip07, warn: options.warn });
    const pubkey = await choice.signer.getPublicKey();
    const address = RelayAddress.parse(options.relay);
    const key = JSON.stringify([address.baseUrl, address.host, pubkey, predicates(options.filter ?? {})]);
    const state = await options.store.open(key);
    // In Node, by default: page N+1's signatures checked in a worker thread while page N is
    // written (`nodeVerifyWorker`: a first sync's rate, median of alternated pairs on two CPUs
    // shared with the relay, 1.05x over 15, 1.11x over 11 with the batch check; a second free
    // core is where it pays, docs/performance.md), and requests through node:http
    // (`nodeTransport`: less CPU per page than fetch). Elsewhere nothing: fetch, one thread.
    const wantsWorker = options.verifyWorker === undefined && options.verify !== false && options.wasmVerifier !== false;
    const wantsTransport = options.transport === undefined && options.fetch === undefined;
    const node = wantsWorker || wantsTransport ? await nodeModule() : undefined;
    if (node !== undefined) {
      options = {
        ...options,
        verifyWorker: wantsWorker ? node.nodeVerifyWorker : options.verifyWorker,
        transport: wantsTransport ? node.nodeTransport() : options.transport,
      };
    }
    const client = new BuzzClient(options, choice.signer, pubkey, choice.source, state);
    client.progressState.total = await options.store.count(key);
    return client;
  }

  // Reading.

  query(query: CollectionQuery = {}): Promise<ArtifactRow[]> {
    return this.store.query(this.key, query);
  }

  get(d: string): Promise<ArtifactRow | undefined> {
    return this.store.get(this.key, d);
  }

  /** Calls `listener` with the query's current rows at once, then after every change to them.
   * Returns the unsubscribe function. */
  subscribe(query: CollectionQuery, listener: Listener<QueryUpdate>): () => void {
    const subscription = new Subscription(query, listener);
    this.subscriptions.add(subscription);
    void this.reload(subscription);
    return () => this.subscriptions.delete(subscription);
  }

  private async reload(subscription: Subscription): Promise<void> {
    // Unlimited: later changes are applied to the full match set, the limit applies on output.
    const rows = await this.store.query(this.key, { ...subscription.query, limit: undefined });
    subscription.rows = new Map(rows.map((row) => [row.d, row]));
    subscription.listener({ rows: subscription.sorted(), added: rows, updated: [], removed: [], reloaded: true });
  }

  private async deliver(changes: LiveChanges): Promise<void> {
    if (!changes.added && !changes.updated && !changes.removed) return;
    for (const subscription of this.subscriptions) {
      if (changes.upserted === null || changes.deleted === null) {
        await this.reload(subscription);
        continue;
      }
      const update: QueryUpdate = { rows: [], added: [], updated: [], removed: [], reloaded: false };
      for (const d of changes.deleted) if (subscription.rows.delete(d)) update.removed.push(d);
      for (const row of changes.upserted) {
        const had = subscription.rows.get(row.d);
        if (matches(row, subscription.query)) {
          if (had?.eventId === row.eventId) continue;
          subscription.rows.set(row.d, row);
          (had ? update.updated : update.added).push(row);
        } else if (had) {
          subscription.rows.delete(row.d);
          update.removed.push(row.d);
        }
      }
      if (update.added.length || update.updated.length || update.removed.length) {
        update.rows = subscription.sorted();
        subscription.listener(update);
      }
    }
  }

  // Events.

  onProgress(listener: Listener<SyncProgress>): () => void {
    this.listeners.progress.add(listener);
    listener({ ...this.progressState });
    return () => this.listeners.progress.delete(listener);
  }

  /** Errors the sync loop will retry (and the fatal ones that stopped it). */
  onError(listener: Listener<BuzzError>): () => void {
    this.listeners.error.add(listener);
    return () => this.listeners.error.delete(listener);
  }

  /** The relay's answer to each write sent from the outbox (conflicts included). */
  onOutcome(listener: Listener<Published>): () => void {
    this.listeners.outcome.add(listener);
    return () => this.listeners.outcome.delete(listener);
  }

  private progress(patch: Partial<SyncProgress>): void {
    this.progressState = { ...this.progressState, ...patch };
    for (const listener of this.listeners.progress) listener({ ...this.progressState });
  }

  private error(error: BuzzError): void {
    for (const listener of this.listeners.error) listener(error);
  }

  // Syncing.

  /**
   * Runs a round now (joining one under way: a round requested meanwhile runs after it). A
   * resumed round is followed by one more, since it kept its first page's T.
   */
  syncNow(info?: RelayInfo): Promise<RoundSummary[]> {
    if (this.syncing) {
      this.again = true;
      return this.syncing;
    }
    const run = async (): Promise<RoundSummary[]> => {
      const done: RoundSummary[] = [];
      this.progress({ syncing: true });
      try {
        const relayInfo = info ?? (await this.syncer.relayInfo());
        do {
          this.again = false;
          const summary = await this.syncer.runRound({ info: relayInfo, onPage: (page) => this.onPage(page) });
          done.push(summary);
          if (summary.resumed) this.again = true;
        } while (this.again);
      } finally {
        this.syncing = null;
        this.progress({ syncing: false, total: await this.store.count(this.key) });
      }
      return done;
    };
    this.syncing = run();
    return this.syncing;
  }

  private onPage(page: PageProgress): void {
    this.progress({ round: { ...page.summary }, complete: this.progressState.complete || page.state.complete });
    void this.deliver(page.changes);
    if (page.state.complete) this.resolveFirstSync();
  }

  /** Starts the loop: a round now, then after each live hint (or poll), until `stop()`. */
  start(): void {
    if (this.running) return;
    this.running = true;
    if (typeof addEventListener === "function") addEventListener("online", this.onOnline);
    void this.loop();
  }

  stop(): void {
    this.running = false;
    if (typeof removeEventListener === "function") removeEventListener("online", this.onOnline);
    this.live?.stop();
    this.live = null;
    this.requestRound();
  }

  private readonly onOnline = (): void => this.requestRound();

  /** Wakes the loop for a round soon (a live hint, an accepted write, the browser online). */
  requestRound(): void {
    this.woken = true;
    this.wake?.();
  }

  private async loop(): Promise<void> {
    let failures = 0;
    const poll = this.options.pollInterval ?? 30;
    const safety = this.options.safetyInterval ?? 300;
    while (this.running) {
      this.woken = false;
      let info: RelayInfo | null = null;
      try {
        info = await this.syncer.relayInfo();
        await this.syncNow(info);
        // The relay answered: whatever waited in the outbox goes now, in order.
        await this.publisher.flush();
        failures = 0;
      } catch (error) {
        const problem = error instanceof BuzzError ? error : new BuzzError("protocol", String(error));
        this.error(problem);
        if (problem.code === "unauthorized" || problem.code === "unknown_community") {
          this.stop();
          return;
        }
        failures += 1;
      }
      if (info && this.options.live !== false && info.sync && !this.live && this.running) {
        this.live = new LiveHints({
          url: this.address.wsUrl(info.syncEndpoint),
          signer: this.signer,
          channels: this.options.filter?.channels,
          WebSocket: this.options.WebSocket,
          onHint: () => this.requestRound(),
          onStatus: (connected) => this.progress({ live: connected }),
        });
        this.live.start();
      }
      const wait = failures ? backoff({ ...this.retry, base: Math.max(1, Math.min(poll, 5)), cap: Math.max(poll, 60) }, failures) : this.live?.connected ? safety : poll;
      if (!this.woken) await this.sleep(wait);
      // A burst of hints (a move's revision and its marker) costs one round.
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  private sleep(seconds: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, seconds * 1000);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = () => {
        this.wake = null;
        done();
      };
    });
  }

  async close(): Promise<void> {
    this.stop();
    await this.syncing?.catch(() => undefined);
    this.syncer.close();
  }

  // Publishing (each returns the relay's OK, or `queued` while offline). An accepted write
  // wakes the loop: the round that follows holds it (read-your-writes).

  private after(result: Promise<Published>): Promise<Published> {
    return result.then((published) => {
      if (published.status === "accepted") this.requestRound();
      return published;
    });
  }

  createChannel(name: string, options?: { private?: boolean; channel?: string }) { return this.after(this.publisher.createChannel(name, options)); }
  editChannel(channel: string, options: { name?: string; visibility?: "public" | "private" }) { return this.after(this.publisher.editChannel(channel, options)); }
  putMember(channel: string, pubkey: string, role?: Role) { return this.after(this.publisher.putMember(channel, pubkey, role)); }
  removeMember(channel: string, pubkey: string) { return this.after(this.publisher.removeMember(channel, pubkey)); }
  createArtifact(o: { channel: string; type: string; title: string; content?: string; d?: string }) { return this.after(this.publisher.createArtifact(o)); }
  updateArtifact(d: string, o?: { title?: string; content?: string; prev?: string }) { return this.after(this.publisher.updateArtifact(d, o)); }
  moveArtifact(d: string, toChannel: string, o?: { prev?: string }) { return this.after(this.publisher.moveArtifact(d, toChannel, o)); }
  deleteArtifact(d: string, o?: { prev?: string }) { return this.after(this.publisher.deleteArtifact(d, o)); }
  restoreArtifact(d: string, o?: { title?: string; content?: string; prev?: string }) { return this.after(this.publisher.restoreArtifact(d, o)); }
  publish(kind: number, tags: string[][], content?: string) { return this.after(this.publisher.publish(kind, tags, content)); }
  /** Sends the outbox now (the loop does it after every round). */
  flushOutbox() { return this.publisher.flush(); }
}
