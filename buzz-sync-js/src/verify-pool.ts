/**
 * Signature checks off the page's thread: a page's events go to a Web Worker running the same
 * WebAssembly verifier (verify-worker.ts) while the page writes the page before. The worker
 * only answers; what to do with a bad event is decided here, and a worker that cannot check
 * (failed to start, WebAssembly refused there) makes the caller check on its own thread. In
 * Node the worker is a worker thread (node-verify.ts) and pages are written to SQLite.
 */

import type { NostrEvent } from "./types.js";

type Answer = { id: number; bad: number } | { id: number; error: string };

/** What a worker is asked: one page's events, or the page's JSON text (its `events`). */
export type VerifyRequest = { id: number; events: NostrEvent[] } | { id: number; text: string };

/** The events a request names (a worker's side); throws for text that is not a page. */
export function requestedEvents(request: VerifyRequest): NostrEvent[] {
  if ("events" in request) return request.events;
  const events = (JSON.parse(request.text) as { events?: unknown }).events;
  if (!Array.isArray(events)) throw new Error("the page text has no events");
  return events as NostrEvent[];
}

/** What `VerifierWorker` needs of a worker: a browser `Worker` has it, and so has
 * `nodeVerifyWorker()`'s wrapper of a Node worker thread (node-verify.ts). */
export interface VerifyWorkerLike {
  onmessage: ((message: MessageEvent) => void) | null;
  onerror: ((error: unknown) => void) | null;
  postMessage(message: unknown): void;
  terminate(): void;
}

export class VerifierWorker {
  private readonly worker: VerifyWorkerLike;
  private readonly waiting = new Map<number, { resolve: (bad: number | null) => void }>();
  private nextId = 0;
  private broken = false;

  constructor(worker: VerifyWorkerLike) {
    this.worker = worker;
    worker.onmessage = ({ data }: MessageEvent<Answer>) => {
      const found = this.waiting.get(data.id);
      this.waiting.delete(data.id);
      found?.resolve("bad" in data ? data.bad : null);
    };
    worker.onerror = () => this.fail();
  }

  /** The index of the first event whose id or signature does not hold, -1 if all hold, or
   * `null` when the worker could not check (the caller then checks them itself). `page`: the
   * events, or the page's JSON text, whose `events` the worker parses itself (the same text
   * parses to the same events, in the same order). */
  check(page: readonly NostrEvent[] | string): Promise<number | null> {
    if (this.broken) return Promise.resolve(null);
    const id = this.nextId++;
    return new Promise((resolve) => {
      this.waiting.set(id, { resolve });
      this.worker.postMessage(typeof page === "string" ? { id, text: page } : { id, events: page });
    });
  }

  private fail(): void {
    this.broken = true;
    for (const { resolve } of this.waiting.values()) resolve(null);
    this.waiting.clear();
  }

  terminate(): void {
    this.worker.terminate();
    this.fail();
  }
}
