/**
 * A Node worker thread's entry (started by `nodeVerifyWorker`, node-verify.ts): the same work as
 * the browser's verify-worker.ts, over the thread's port. It checks one page's events with the
 * WebAssembly verifier and answers with the index of the first that fails (-1: all hold), so
 * that the calling thread writes page N to SQLite while page N+1's signatures are checked here.
 */

import { parentPort } from "node:worker_threads";

import { firstForged, loadWasmVerifier } from "./verifier.js";
import { requestedEvents, type VerifyRequest } from "./verify-pool.js";

const port = parentPort;
if (port === null) throw new Error("verify-thread.js runs as a worker thread (see nodeVerifyWorker)");
const ready = loadWasmVerifier();

port.on("message", (request: VerifyRequest) => {
  ready.then(
    (verify) => port.postMessage({ id: request.id, bad: firstForged(verify, requestedEvents(request)) }),
  ).catch((error: unknown) => port.postMessage({ id: request.id, error: String(error) }));
});
