/**
 * Signature checks off the page's thread: a page's events go to a Web Worker running the same
 * WebAssembly verifier (verify-worker.ts) while the page writes the page before. The worker
 * only answers; what to do with a bad event is decided here, and a worker that cannot check
 * (failed to start, WebAssembly refused there) makes the caller check on its own thread.
 */

import type { NostrEvent } from "./types.js";

type Answer = { id: number; bad: number } | { id: number; error: string };

export class VerifierWorker {
  private readonly worker: Worker;
  private readonly waiting = new Map<number, { resolve: (bad: number | null) => void }>();
  private nextId = 0;
  private broken = false;

  constructor(worker: Worker) {
    this.worker = worker;
    worker.onmessage = ({ data }: MessageEvent<Answer>) => {
      const found = this.waiting.get(data.id);
      this.waiting.delete(data.id);
      found?.resolve("bad" in data ? data.bad : null);
    };
    worker.onerror = () => this.fail();
  }

  /** The index of the first event whose id or signature does not hold, -1 if all hold, or
   * `null` when the worker could not check (the caller then checks them itself). */
  check(events: readonly NostrEvent[]): Promise<number | null> {
    if (this.broken) return Promise.resolve(null);
    const id = this.nextId++;
    return new Promise((resolve) => {
      this.waiting.set(id, { resolve });
      this.worker.postMessage({ id, events });
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
