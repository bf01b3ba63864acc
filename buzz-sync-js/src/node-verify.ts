/**
 * Node's parts, the package's `buzz-sync-js/node` entry (never its browser entry):
 * `nodeVerifyWorker`, a page's signatures checked in a worker thread (verify-thread.ts) while
 * the calling thread writes the page before to SQLite (`BuzzClient.open({ verifyWorker:
 * nodeVerifyWorker })`, the default in Node), and `nodeTransport` (node-http.ts), the relay's
 * HTTP through node:http. The worker has the browser Worker's shape that `VerifierWorker`
 * (verify-pool.ts) drives, so a thread that fails (cannot start, exits) makes the caller check
 * on its own thread, as in a browser.
 */

import { Worker } from "node:worker_threads";

import type { VerifyWorkerLike } from "./verify-pool.js";

// The Node transport lives beside it, in the same Node-only entry (`buzz-sync-js/node`).
export { nodeTransport } from "./node-http.js";

/** A worker thread running `script` (default: this package's verify-thread.js). The thread holds
 * the process open only while a page is being checked: an app that never closes its client
 * still exits, and one awaiting a check is not ended under it. */
export function nodeVerifyWorker(script: URL = new URL("./verify-thread.js", import.meta.url)): VerifyWorkerLike {
  // None of the app's Node flags: they are the app's (an `--input-type` or `--import` would even
  // stop the thread from starting), and this module needs none.
  const thread = new Worker(script, { execArgv: [] });
  let checking = 0;
  const shape: VerifyWorkerLike = {
    onmessage: null,
    onerror: null,
    postMessage: (message) => {
      if (checking++ === 0) thread.ref();
      thread.postMessage(message);
    },
    terminate: () => void thread.terminate(),
  };
  const idle = (): void => {
    checking = 0;
    thread.unref();
  };
  thread.on("message", (data: unknown) => {
    if (--checking <= 0) idle();
    shape.onmessage?.({ data } as MessageEvent);
  });
  thread.on("error", (error: unknown) => {
    idle();
    shape.onerror?.(error);
  });
  // A thread that exits on its own (killed, out of memory) answers nothing more.
  thread.on("exit", () => {
    idle();
    shape.onerror?.(new Error("verify thread exited"));
  });
  thread.unref(); // after the listeners: a "message" listener added later refs the thread again
  return shape;
}
