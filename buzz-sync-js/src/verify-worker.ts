/**
 * A Web Worker's entry (the page builds it as its own script): checks the events of one page
 * with the WebAssembly verifier and answers with the index of the first that fails (-1: all
 * hold), so that the page's thread writes one page while the next page's signatures are
 * checked here. See `VerifierWorker` (verify-pool.ts) for the other side, and verify-thread.ts
 * for the same in a Node worker thread.
 */

import { firstForged, loadWasmVerifier } from "./verifier.js";
import { requestedEvents, type VerifyRequest } from "./verify-pool.js";

interface WorkerScope {
  onmessage: ((message: MessageEvent<VerifyRequest>) => void) | null;
  postMessage(message: unknown): void;
}

const scope = globalThis as unknown as WorkerScope;
const ready = loadWasmVerifier();

scope.onmessage = ({ data: request }) => {
  ready.then(
    (verify) => scope.postMessage({ id: request.id, bad: firstForged(verify, requestedEvents(request)) }),
  ).catch((error: unknown) => scope.postMessage({ id: request.id, error: String(error) }));
};
