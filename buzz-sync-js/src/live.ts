/**
 * The live stream (PROTOCOL.md section 8): one WebSocket, NIP-42 AUTH, a subscription to the
 * sync kinds, and a hint to the app's sync loop whenever something may have changed. The
 * stream is a view, not a sync log: the collection only ever changes through an HTTP round,
 * which keeps the token-beside-data guarantee. Missed hints cost latency, never correctness:
 * a reconnect, a `NOTICE` or a `CLOSED` each trigger a round too, and the client keeps a slow
 * poll under the stream as a safety net (buzzclient/watch.py does the same).
 *
 * The connection also carries `EVENT` publishes when the app asks for them (`OK` answered).
 */

import { makeAuthEvent } from "nostr-tools/nip42";

import { backoff, defaultRetry, type RetryPolicy } from "./backoff.js";
import type { OkAnswer } from "./relay.js";
import type { Signer } from "./signer.js";
import type { NostrEvent } from "./types.js";
import { KIND_ARTIFACT, KIND_REMOVAL_MARKER } from "./types.js";

/** What the relay streams today; 9005 and the membership kinds join the list once the relay
 * serves them live (PROTOCOL.md section 8 allows naming them; until then a NOTICE/CLOSED
 * announces access changes). */
export const LIVE_KINDS = [KIND_ARTIFACT, KIND_REMOVAL_MARKER];
const MAX_TAG_VALUES = 256;
const SESSION_TIMEOUT_MS = 10_000;

/** The parts of the WHATWG WebSocket this uses (browsers, Node 22, Node 20 with
 * `--experimental-websocket`, or the `ws` package). */
export interface WebSocketLike {
  readyState: number;
  send(data: string): void;
  close(): void;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: unknown) => void) | null;
  onerror: ((ev: unknown) => void) | null;
}
export type WebSocketFactory = new (url: string) => WebSocketLike;

export interface LiveOptions {
  url: string;
  signer: Signer;
  channels?: readonly string[];
  onHint: (reason: string) => void;
  onStatus?: (connected: boolean) => void;
  WebSocket?: WebSocketFactory;
  retry?: Partial<RetryPolicy>;
}

export class LiveHints {
  connected = false;
  private readonly options: LiveOptions;
  private readonly retry: RetryPolicy;
  private socket: WebSocketLike | null = null;
  private stopped = false;
  private failures = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private readonly waitingOk = new Map<string, (answer: OkAnswer) => void>();

  constructor(options: LiveOptions) {
    this.options = options;
    this.retry = { ...defaultRetry, base: 1, cap: 60, ...options.retry };
  }

  start(): void {
    this.stopped = false;
    this.connect();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.socket?.close();
    this.socket = null;
    this.setConnected(false);
  }

  /** Sends an event as `["EVENT", ...]` and resolves with the relay's `OK`. */
  publish(event: NostrEvent, timeoutMs = SESSION_TIMEOUT_MS): Promise<OkAnswer> {
    const socket = this.socket;
    if (!socket || !this.connected) return Promise.reject(new Error("the live connection is not open"));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waitingOk.delete(event.id);
        reject(new Error("no OK within the timeout"));
      }, timeoutMs);
      this.waitingOk.set(event.id, (answer) => {
        clearTimeout(timer);
        resolve(answer);
      });
      socket.send(JSON.stringify(["EVENT", event]));
    });
  }

  private setConnected(value: boolean): void {
    if (this.connected !== value) {
      this.connected = value;
      this.options.onStatus?.(value);
    }
  }

  private connect(): void {
    const Factory = this.options.WebSocket ?? (globalThis as { WebSocket?: WebSocketFactory }).WebSocket;
    if (!Factory) throw new Error("no WebSocket implementation: pass one (e.g. the ws package) or run Node with --experimental-websocket");
    let socket: WebSocketLike;
    try {
      socket = new Factory(this.options.url);
    } catch {
      this.scheduleReconnect();
      return;
    }
    this.socket = socket;
    const subscriptions = new Set<string>();
    const live = new Set<string>();
    let authId: string | null = null;
    const guard = setTimeout(() => socket.close(), SESSION_TIMEOUT_MS);
    socket.onmessage = (message) => {
      let parsed: unknown;
      try {
        parsed = JSON.parse(String(message.data));
      } catch {
        return;
      }
      if (!Array.isArray(parsed)) return;
      const [verb, a, b, c] = parsed as [unknown, unknown, unknown, unknown];
      if (verb === "AUTH" && typeof a === "string" && authId === null) {
        void this.options.signer.signEvent(makeAuthEvent(this.options.url, a)).then((auth) => {
          authId = auth.id;
          socket.send(JSON.stringify(["AUTH", auth]));
        });
      } else if (verb === "OK" && a === authId && authId !== null && !subscriptions.size) {
        if (b !== true) {
          socket.close();
          return;
        }
        clearTimeout(guard);
        for (const id of this.subscribe(socket)) subscriptions.add(id);
        const after = this.failures > 0;
        this.failures = 0;
        this.setConnected(true);
        // Whatever changed while we were away reached no live stream of ours: one round.
        this.options.onHint(after ? "reconnected" : "subscribed");
      } else if (verb === "OK" && typeof a === "string" && this.waitingOk.has(a)) {
        const resolve = this.waitingOk.get(a)!;
        this.waitingOk.delete(a);
        resolve({ eventId: a, accepted: b === true, message: typeof c === "string" ? c : "" });
      } else if (verb === "EOSE" && typeof a === "string") {
        live.add(a); // replay done: later EVENTs are news
      } else if (verb === "EVENT" && typeof a === "string" && live.has(a)) {
        this.options.onHint("live event");
      } else if (verb === "NOTICE") {
        this.options.onHint("notice");
      } else if (verb === "CLOSED" && typeof a === "string" && subscriptions.has(a)) {
        subscriptions.delete(a);
        // Access to a named channel was revoked: a round removes what went with it.
        this.options.onHint("subscription closed");
        if (!subscriptions.size) socket.close();
      }
    };
    socket.onclose = () => {
      clearTimeout(guard);
      for (const [id, resolve] of this.waitingOk) resolve({ eventId: id, accepted: false, message: "error: connection closed before OK" });
      this.waitingOk.clear();
      if (this.socket === socket) this.socket = null;
      this.setConnected(false);
      this.scheduleReconnect();
    };
    socket.onerror = () => undefined; // onclose follows
  }

  private subscribe(socket: WebSocketLike): string[] {
    const channels = [...new Set(this.options.channels ?? [])].sort();
    const filters: Record<string, unknown>[] = [];
    // limit 1: the replay before EOSE is not needed (rounds fetch the data).
    for (let i = 0; i < channels.length; i += MAX_TAG_VALUES) {
      filters.push({ kinds: LIVE_KINDS, "#h": channels.slice(i, i + MAX_TAG_VALUES), limit: 1 });
    }
    if (!filters.length) filters.push({ kinds: LIVE_KINDS, limit: 1 });
    return filters.map((filter) => {
      const id = "buzz-sync-js-" + Math.random().toString(16).slice(2, 10);
      socket.send(JSON.stringify(["REQ", id, filter]));
      return id;
    });
  }

  private scheduleReconnect(): void {
    if (this.stopped) return;
    this.failures += 1;
    this.timer = setTimeout(() => this.connect(), backoff(this.retry, this.failures) * 1000);
  }
}
